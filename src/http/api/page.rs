//! Pages of list endpoints: `?limit=` (default [`DEFAULT_LIMIT`], at most [`MAX_LIMIT`]) and
//! `?cursor=`, the opaque `next_cursor` of the previous page (`null` on the last page).
//! Pages are keyset pages: an item added or removed meanwhile never shifts the others.

use crate::error::{ApiError, ApiResult};

pub const DEFAULT_LIMIT: i64 = 100;
pub const MAX_LIMIT: i64 = 1000;

/// What a request asks for: how many items, after which key.
#[derive(Debug, Clone)]
pub struct PageRequest {
    pub limit: i64,
    /// The key of the last item of the previous page.
    pub after: Option<(String, String)>,
}

impl PageRequest {
    /// The page `?limit=` (already checked by the query extractor) and `?cursor=` ask for.
    pub fn new(limit: Option<i64>, cursor: Option<&str>) -> ApiResult<Self> {
        let after = match cursor {
            None | Some("") => None,
            Some(cursor) => Some(decode(cursor).ok_or_else(|| {
                ApiError::bad_request(
                    "invalid cursor: pass the next_cursor of the previous page unchanged",
                )
            })?),
        };
        Ok(Self {
            limit: limit.unwrap_or(DEFAULT_LIMIT),
            after,
        })
    }

    /// How many items to fetch: one more than the page, to know whether another follows.
    pub fn fetch(&self) -> i64 {
        self.limit + 1
    }

    /// The page out of `items` (fetched with [`Self::fetch`]) and the cursor of the next one.
    pub fn split<T>(
        &self,
        mut items: Vec<T>,
        key: impl Fn(&T) -> (&str, &str),
    ) -> (Vec<T>, Option<String>) {
        let limit = usize::try_from(self.limit).unwrap_or(usize::MAX);
        if items.len() <= limit {
            return (items, None);
        }
        items.truncate(limit);
        let next = items.last().map(|last| encode(key(last)));
        (items, next)
    }
}

fn encode((a, b): (&str, &str)) -> String {
    hex::encode(serde_json::json!([a, b]).to_string())
}

fn decode(cursor: &str) -> Option<(String, String)> {
    if cursor.len() > 2048 {
        return None;
    }
    let bytes = hex::decode(cursor).ok()?;
    let (a, b): (String, String) = serde_json::from_slice(&bytes).ok()?;
    Some((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let c = encode(("svc", "agent-1"));
        assert_eq!(decode(&c), Some(("svc".into(), "agent-1".into())));
        for bad in ["zz", "00", &hex::encode("[1,2]"), &"a".repeat(4096)] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn split_gives_a_cursor_only_when_more_follow() {
        let req = PageRequest {
            limit: 2,
            after: None,
        };
        fn key(s: &(String, String)) -> (&str, &str) {
            (&s.0, &s.1)
        }
        let items = |n: usize| -> Vec<(String, String)> {
            (0..n).map(|i| ("s".into(), i.to_string())).collect()
        };
        assert_eq!(req.split(items(2), key).1, None);
        let (page, next) = req.split(items(3), key);
        assert_eq!(page.len(), 2);
        assert_eq!(decode(&next.unwrap()), Some(("s".into(), "1".into())));
    }
}
