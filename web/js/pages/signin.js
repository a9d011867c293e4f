// The sign-in page: a token, checked against the server, then the role it grants.

import { api, caps, session } from '../api.js';
import { h } from '../dom.js';
import { ui } from '../ui.js';

export function signIn(root, _params, ctx) {
  document.title = 'Sign in · budgetd';
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false', required: true, 'aria-describedby': 'token-help' });
  const msg = h('div', { id: 'signin-msg', 'aria-live': 'polite' });
  if (ctx.message) msg.appendChild(ctx.message);
  const button = h('button', { type: 'submit', class: 'button-primary' }, 'Sign in');
  const form = h('form', {
    id: 'signin-form', class: 'signin',
    onsubmit: async (ev) => {
      ev.preventDefault();
      const token = input.value.trim();
      if (!token) return;
      button.disabled = true;
      msg.replaceChildren(ui.loading('Checking the token…'));
      try {
        await api.request('GET', '/chains', { token });
        const c = await caps.detect(token);
        session.signIn(token, c);
        ctx.start();
      } catch (e) {
        msg.replaceChildren(e.status === 401
          ? ui.error(e, 'This token was not accepted')
          : ui.error(e, 'Sign-in failed'));
        button.disabled = false;
        input.focus();
      }
    },
  },
  h('h1', { tabindex: '-1' }, 'Sign in to budgetd'),
  h('label', { for: 'token' }, 'API token'),
  input,
  h('p', { id: 'token-help', class: 'help' }, 'Paste a token created with “budgetctl token create” (or the admin token). It is kept in this browser tab only (sessionStorage) and sent only to this server. What you may do is learned from the server; it still checks every action.'),
  button,
  msg);
  root.appendChild(form);
  input.focus();
}
