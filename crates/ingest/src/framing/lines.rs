//! Splitting pushed chunks into lines without holding the whole input.

/// Collects bytes until a newline and hands out complete lines (without `\n` / `\r\n`).
#[derive(Debug, Default)]
pub struct LineBuffer {
    partial: Vec<u8>,
    line_no: u64,
    max_line: usize,
}

impl LineBuffer {
    /// `max_line`: longest line accepted, in bytes (a guard against binary input).
    pub fn new(max_line: usize) -> Self {
        Self {
            partial: Vec::new(),
            line_no: 0,
            max_line,
        }
    }

    /// Calls `f(line_no, line)` for every complete line in `chunk`.
    pub fn push<E>(
        &mut self,
        chunk: &[u8],
        mut f: impl FnMut(u64, &[u8]) -> Result<(), E>,
        too_long: impl Fn(u64) -> E,
    ) -> Result<(), E> {
        let mut rest = chunk;
        while let Some(pos) = memchr::memchr(b'\n', rest) {
            self.line_no += 1;
            if self.partial.is_empty() {
                f(self.line_no, trim_cr(&rest[..pos]))?;
            } else {
                self.partial.extend_from_slice(&rest[..pos]);
                let line = std::mem::take(&mut self.partial);
                f(self.line_no, trim_cr(&line))?;
            }
            rest = &rest[pos + 1..];
        }
        self.partial.extend_from_slice(rest);
        if self.partial.len() > self.max_line {
            return Err(too_long(self.line_no + 1));
        }
        Ok(())
    }

    /// The last line when the input does not end with a newline.
    pub fn finish<E>(&mut self, mut f: impl FnMut(u64, &[u8]) -> Result<(), E>) -> Result<(), E> {
        if !self.partial.is_empty() {
            self.line_no += 1;
            let line = std::mem::take(&mut self.partial);
            f(self.line_no, trim_cr(&line))?;
        }
        Ok(())
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_across_chunks() {
        let input = b"a,b\r\nccc\n\nlast";
        for size in 1..input.len() {
            let mut buf = LineBuffer::new(100);
            let mut got = Vec::new();
            for c in input.chunks(size) {
                buf.push(
                    c,
                    |n, l| {
                        got.push((n, l.to_vec()));
                        Ok::<_, ()>(())
                    },
                    |_| (),
                )
                .unwrap();
            }
            buf.finish(|n, l| {
                got.push((n, l.to_vec()));
                Ok::<_, ()>(())
            })
            .unwrap();
            assert_eq!(
                got,
                vec![
                    (1, b"a,b".to_vec()),
                    (2, b"ccc".to_vec()),
                    (3, vec![]),
                    (4, b"last".to_vec())
                ]
            );
        }
        let mut buf = LineBuffer::new(3);
        assert_eq!(buf.push(b"abcdef", |_, _| Ok(()), |n| n), Err(1));
    }
}
