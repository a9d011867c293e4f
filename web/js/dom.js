// dom — element builders (h, s) that never touch innerHTML: the console's strict CSP allows no
// inline script or style, so every element is built with DOM calls.

const SVG_NS = 'http://www.w3.org/2000/svg';

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
  return el;
}

function setAttrs(el, attrs, isSvg) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.setAttribute('class', Array.isArray(v) ? v.filter(Boolean).join(' ') : v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (!isSvg && (k === 'disabled' || k === 'hidden' || k === 'required' || k === 'selected' || k === 'checked' || k === 'open')) el[k] = Boolean(v);
    else if (!isSvg && k === 'value') el.value = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  return el;
}

/** An HTML element: h('a', {href: '#/'}, 'text', child, [more]). */
export function h(tag, attrs, ...children) {
  return append(setAttrs(document.createElement(tag), attrs, false), children);
}

/** An SVG element. */
export function s(tag, attrs, ...children) {
  return append(setAttrs(document.createElementNS(SVG_NS, tag), attrs, true), children);
}

export const enc = encodeURIComponent;
