//! Reading the JSON summaries of load tools (oha, k6) in bounded memory.
//!
//! A summary is collected by [`JsonBuffer`] up to [`MAX_JSON_SUMMARY_BYTES`] — refused at the push
//! that crosses it, so nothing past the cap is ever held — and parsed at the end. The text is kept
//! because errors quote it: a syntax error gets its line and column, a semantic one the line of
//! the key at fault ([`JsonBuffer::locate`]).
//!
//! Parsing never builds a `serde_json::Value` tree. Each format describes the parts it reads as
//! [`Fold`]s: an object is visited member by member, the members a parser needs are folded into
//! small typed state (a running sum, the first key of a percentile, a [`Scalar`]), and every other
//! value is validated and dropped as it is read ([`Skip`]). Memory is the text plus what is kept,
//! not a tree of the whole document. Validation is the same as a `Value` parse (every string is
//! checked for UTF-8 and escapes, as `Value` does), so the same inputs are refused, with the same
//! line, column and message.

mod fold;

pub(crate) use fold::{first_in_key_order, skip, Fold, Obj, Scalar, Skip};

use crate::{IngestError, MAX_JSON_SUMMARY_BYTES};

// ---- Collecting the text ---------------------------------------------------------------------

/// Collects a JSON upload up to [`MAX_JSON_SUMMARY_BYTES`] and parses it at the end.
#[derive(Debug)]
pub(crate) struct JsonBuffer {
    buf: Vec<u8>,
    format: &'static str,
    /// Set once a push went over the cap: every later call answers the same error.
    over: bool,
}

impl JsonBuffer {
    pub(crate) fn new(format: &'static str) -> Self {
        Self {
            buf: Vec::new(),
            format,
            over: false,
        }
    }

    fn too_large(&self) -> IngestError {
        IngestError::new(format!(
            "{} JSON is larger than the limit of {} MiB ({MAX_JSON_SUMMARY_BYTES} bytes) for tool \
             summaries: a summary is a few KiB, is this the right file?",
            self.format,
            MAX_JSON_SUMMARY_BYTES >> 20,
        ))
    }

    /// Appends `chunk`, or refuses it (and drops what was collected) when the input would go over
    /// [`MAX_JSON_SUMMARY_BYTES`]. The buffer's capacity never exceeds the cap either.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<(), IngestError> {
        let len = self.buf.len().saturating_add(chunk.len());
        if self.over || len > MAX_JSON_SUMMARY_BYTES {
            self.over = true;
            self.buf = Vec::new();
            return Err(self.too_large());
        }
        if len > self.buf.capacity() {
            let want = len.max(self.buf.capacity() * 2).min(MAX_JSON_SUMMARY_BYTES);
            self.buf.reserve_exact(want - self.buf.len());
        }
        self.buf.extend_from_slice(chunk);
        Ok(())
    }

    /// The top-level object read into `T`, or an error with the line of a syntax error.
    pub(crate) fn parse<T: Fold>(&self) -> Result<T, IngestError> {
        let text = self.text(json_object_start, "a JSON object")?;
        match serde_json::from_slice::<Obj<T>>(text) {
            Ok(Obj::Object(doc)) => Ok(doc),
            Ok(_) => Err(IngestError::at_line(1, "expected a JSON object")),
            Err(e) => Err(self.syntax_error(text, &e)),
        }
    }

    /// The top-level array read into `T` (whose `Deserialize` reads a sequence, e.g. element by
    /// element into bounded state), or an error with the line of a syntax error.
    pub(crate) fn parse_array<T: serde::de::DeserializeOwned>(&self) -> Result<T, IngestError> {
        let text = self.text(json_array_start, "a JSON array")?;
        serde_json::from_slice::<T>(text).map_err(|e| self.syntax_error(text, &e))
    }

    /// The collected text from where `start` finds the document (after a UTF-8 BOM), or the
    /// error for an empty input or one that does not start with `what`.
    fn text(&self, start: fn(&[u8]) -> Option<&[u8]>, what: &str) -> Result<&[u8], IngestError> {
        if self.over {
            return Err(self.too_large());
        }
        let Some(start) = start(&self.buf) else {
            return Err(
                if self.buf.iter().all(u8::is_ascii_whitespace) || self.buf == b"\xEF\xBB\xBF" {
                    IngestError::new(format!("empty input: expected {} JSON", self.format))
                } else {
                    let line = first_content_line(&self.buf);
                    IngestError::at_line(
                        line,
                        format!("expected {what} ({} summary) here", self.format),
                    )
                },
            );
        };
        let bom = self.buf.len() - start.len();
        Ok(&self.buf[bom..])
    }

    /// A syntax error of serde_json, with its line, column and the last key before it.
    fn syntax_error(&self, text: &[u8], e: &serde_json::Error) -> IngestError {
        let what = if e.is_eof() {
            "truncated JSON"
        } else {
            "invalid JSON"
        };
        let mut err = IngestError::at_line(
            e.line() as u64,
            format!(
                "{what} ({} summary), column {}: {}",
                self.format,
                e.column(),
                strip_position(e)
            ),
        );
        if let Some(key) = last_key_before(text, e.line(), e.column()) {
            err = err.field(key);
        }
        err
    }

    /// Adds the line of the field an error names (a JSON pointer) when it has none: the line of
    /// the deepest key of the pointer found in the text, searched in order (so for a missing key,
    /// the line of its parent). A best effort: a key the file escapes differently is not found.
    pub(crate) fn locate(&self, mut err: IngestError) -> IngestError {
        let Some(path) = err.field.as_deref().and_then(|f| f.strip_prefix('/')) else {
            return err;
        };
        if err.line.is_some() {
            return err;
        }
        let text = &self.buf[..];
        let bom = if text.starts_with(b"\xEF\xBB\xBF") {
            3
        } else {
            0
        };
        let (mut range, mut found) = (bom..text.len(), None);
        for part in path.split('/') {
            let key = part.replace("~1", "/").replace("~0", "~");
            // An index into an array (Locust's top-level list of entries): that element.
            let open = text[range.clone()]
                .iter()
                .position(|b| !b.is_ascii_whitespace())
                .map(|at| range.start + at)
                .filter(|&at| text[at] == b'[');
            if let (Some(open), Ok(index)) = (open, key.parse::<usize>()) {
                let Some(element) = array_element(text, open, index) else {
                    break;
                };
                found = Some(element.start);
                range = element;
                continue;
            }
            let Ok(needle) = serde_json::to_string(&key) else {
                break;
            };
            let Some((at, value)) = find_key(&text[range.clone()], needle.as_bytes()) else {
                break;
            };
            found = Some(range.start + at);
            range = range.start + value.start..range.start + value.end;
        }
        if let Some(at) = found {
            err.line = Some(1 + text[..at].iter().filter(|&&b| b == b'\n').count() as u64);
        }
        err
    }
}

/// The offset of the first `"key"` in `text` followed by `:` (an object key), and the range of
/// its value.
fn find_key(text: &[u8], needle: &[u8]) -> Option<(usize, std::ops::Range<usize>)> {
    let mut start = 0;
    loop {
        let at = start
            + text
                .get(start..)?
                .windows(needle.len())
                .position(|w| w == needle)?;
        let after = at + needle.len();
        let colon = after
            + text[after..]
                .iter()
                .position(|b| !b.is_ascii_whitespace())?;
        if text[colon] == b':' {
            let value = colon + 1;
            return Some((at, value..value_end(text, value)));
        }
        start = at + 1;
    }
}

/// The range of element `index` of the array whose `[` is at `open`, from its first byte.
/// Lenient, as [`value_end`].
fn array_element(text: &[u8], open: usize, index: usize) -> Option<std::ops::Range<usize>> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let (mut current, mut start) = (0usize, None::<usize>);
    for (i, &b) in text.iter().enumerate().skip(open + 1) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        if depth == 0 && start.is_none() && current == index && !b.is_ascii_whitespace() {
            if b == b']' {
                return None;
            }
            start = Some(i);
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth > 0 => depth -= 1,
            b']' | b',' if depth == 0 => {
                if let Some(start) = start {
                    return Some(start..i);
                }
                if b == b']' {
                    return None;
                }
                current += 1;
            }
            _ => {}
        }
    }
    start.map(|start| start..text.len())
}

/// Where the JSON value starting at (or after whitespace from) `from` ends: past its closing
/// bracket for an object or array, else at the next `,`, `}` or `]` outside strings. Lenient:
/// the text was already parsed, this only has to bound a search.
fn value_end(text: &[u8], from: usize) -> usize {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &b) in text.iter().enumerate().skip(from) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth <= 1 => return if depth == 1 { i + 1 } else { i },
            b'}' | b']' => depth -= 1,
            b',' if depth == 0 => return i,
            _ => {}
        }
    }
    text.len()
}

/// The input from its `{` on (after a UTF-8 BOM and whitespace), when it starts like an object.
pub(crate) fn json_object_start(head: &[u8]) -> Option<&[u8]> {
    let head = head.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(head);
    let start = head.iter().position(|b| !b.is_ascii_whitespace())?;
    (head[start] == b'{').then_some(head)
}

/// The input (after a UTF-8 BOM), when its first byte other than whitespace is `[`.
pub(crate) fn json_array_start(head: &[u8]) -> Option<&[u8]> {
    let head = head.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(head);
    let start = head.iter().position(|b| !b.is_ascii_whitespace())?;
    (head[start] == b'[').then_some(head)
}

pub(crate) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn first_content_line(buf: &[u8]) -> u64 {
    let start = buf
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(0);
    1 + buf[..start].iter().filter(|&&b| b == b'\n').count() as u64
}

/// serde_json's message without its trailing " at line L column C" (reported separately).
fn strip_position(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_owned(),
        None => msg,
    }
}

/// The last object key (`"key":`) before line/column of an error, as a hint of where it is.
fn last_key_before(text: &[u8], line: usize, column: usize) -> Option<String> {
    let mut offset = 0usize;
    for (i, l) in text.split(|&b| b == b'\n').enumerate() {
        if i + 1 == line {
            offset += column.min(l.len());
            break;
        }
        offset += l.len() + 1;
    }
    let before = String::from_utf8_lossy(&text[..offset.min(text.len())]).into_owned();
    let colon = before.rfind("\":")?;
    let open = before[..colon].rfind('"')?;
    let key = &before[open + 1..colon];
    (!key.is_empty() && key.len() <= 200).then(|| format!("near key \"{key}\""))
}

/// A JSON pointer (RFC 6901) of `parts`.
pub(crate) fn pointer<S: AsRef<str>>(parts: &[S]) -> String {
    parts.iter().fold(String::new(), |mut p, s| {
        p.push('/');
        p.push_str(&s.as_ref().replace('~', "~0").replace('/', "~1"));
        p
    })
}

pub(crate) fn field_error<S: AsRef<str>>(parts: &[S], message: impl Into<String>) -> IngestError {
    IngestError::new(message).field(pointer(parts))
}

/// A request count: a non-negative integral number.
pub(crate) fn count<S: AsRef<str>>(v: &Scalar, path: &[S]) -> Result<u64, IngestError> {
    if let Some(n) = v.as_u64() {
        return Ok(n);
    }
    match v.as_f64() {
        Some(x) if x >= 0.0 && x.fract() == 0.0 && x < 9.0e15 => Ok(x as u64),
        _ => Err(field_error(
            path,
            "must be a non-negative whole number (a count of requests)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde::de::MapAccess;

    use super::*;

    /// The members of an object, as (key, value) in document order.
    #[derive(Debug, Default)]
    struct Members(Vec<(String, Scalar)>);

    impl Fold for Members {
        fn member<'de, A: MapAccess<'de>>(
            &mut self,
            key: String,
            map: &mut A,
        ) -> Result<(), A::Error> {
            if key == "skipped" {
                return skip(map);
            }
            let v = map.next_value::<Scalar>()?;
            self.0.push((key, v));
            Ok(())
        }
    }

    fn parse(input: &[u8]) -> Result<Members, IngestError> {
        let mut buf = JsonBuffer::new("test");
        buf.push(input)?;
        buf.parse::<Members>()
    }

    #[test]
    fn json_pointer_escapes() {
        assert_eq!(pointer(&["a/b", "c~d", "p(99.9)"]), "/a~1b/c~0d/p(99.9)");
    }

    #[test]
    fn scalars_print_like_json_values() {
        let input = br#"{"a": null, "b": true, "c": -3, "d": 2.5, "e": "x\"y", "f": [1],
            "g": {"h": 1}, "i": 7}"#;
        let m = parse(input).unwrap();
        let shown: Vec<String> = m.0.iter().map(|(_, v)| v.to_string()).collect();
        assert_eq!(
            shown,
            ["null", "true", "-3", "2.5", r#""x\"y""#, "[…]", "{…}", "7"]
        );
        // Leaves print exactly as `serde_json::Value` prints them (k6's `type` errors quote them).
        let tree: serde_json::Value = serde_json::from_slice(input).unwrap();
        for (key, v) in
            m.0.iter()
                .filter(|(_, v)| !matches!(v, Scalar::Array | Scalar::Object))
        {
            assert_eq!(v.to_string(), tree[key].to_string());
        }
        assert_eq!(m.0[7].1.as_u64(), Some(7));
        assert_eq!(m.0[3].1.as_f64(), Some(2.5));
        assert_eq!(m.0[4].1.as_str(), Some("x\"y"));
    }

    /// Skipped values are validated as a `serde_json::Value` parse validates them: the same
    /// inputs are refused, with the same message, line and column.
    #[test]
    fn skipped_values_are_validated_like_a_value_parse() {
        let cases: &[&[u8]] = &[
            b"{\"skipped\": \"\xff\"}",
            b"{\"skipped\": {\"\xff\": 1}}",
            br#"{"skipped": "\ud800"}"#,
            br#"{"skipped": "\q"}"#,
            b"{\"skipped\": [1, 2,]}",
            b"{\"skipped\": 1e400}",
            b"{\"skipped\": \"a\nb\"}",
            b"{\"skipped\": 1} x",
        ];
        let deep = format!("{{\"skipped\": {}1{}}}", "[".repeat(200), "]".repeat(200));
        for input in cases.iter().copied().chain([deep.as_bytes()]) {
            let want = serde_json::from_slice::<serde_json::Value>(input).unwrap_err();
            let got = parse(input).unwrap_err();
            assert_eq!(got.line, Some(want.line() as u64), "{got}");
            assert!(!want.is_eof(), "{want}");
            assert!(
                got.message.ends_with(&format!(
                    "column {}: {}",
                    want.column(),
                    strip_position(&want)
                )),
                "{got} / {want}"
            );
        }
        assert!(parse(br#"{"skipped": {"a": ["\u00e9", {"b": null}]}, "k": 1}"#).is_ok());
    }

    #[test]
    fn the_buffer_never_grows_past_the_cap() {
        let mut buf = JsonBuffer::new("test");
        let chunk = vec![b' '; 300_000];
        while buf.buf.len() + chunk.len() <= MAX_JSON_SUMMARY_BYTES {
            buf.push(&chunk).unwrap();
            assert!(buf.buf.capacity() <= MAX_JSON_SUMMARY_BYTES);
        }
        let err = buf.push(&chunk).unwrap_err();
        assert!(err.message.contains("4 MiB (4194304 bytes)"), "{err}");
        assert_eq!(buf.buf.capacity(), 0, "what was collected is dropped");
        // Every later call answers the same.
        assert_eq!(buf.push(b" ").unwrap_err(), err);
        assert_eq!(buf.parse::<Members>().unwrap_err(), err);
    }
}
