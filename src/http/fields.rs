//! Reading one of `budget_api`'s request types from named fields — the members of a JSON body,
//! or the parameters of a query string — with serde, in the order the type declares its
//! fields, and telling which field failed and how. The extractors in [`super::extract`] answer
//! that field's own error (the words the API has always used); serde's are not shown.

use std::fmt;
use std::ops::RangeInclusive;

use serde::de::value::StrDeserializer;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::forward_to_deserialize_any;
use serde_json::Value;

/// The longest string a declared field of a JSON request body may hold, in bytes.
pub const MAX_TEXT: usize = 4096;

/// Why a value could not be read.
#[derive(Debug)]
pub enum FieldError {
    /// A field the type requires is absent (or, in JSON, null).
    Missing(String),
    /// A field's value is not of its type; `why` says how.
    Invalid { field: String, why: String },
    /// Anything else serde reports (not expected of a flat request type).
    Other(String),
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(field) => write!(f, "{field} is missing"),
            Self::Invalid { field, why } => write!(f, "{field}: {why}"),
            Self::Other(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for FieldError {}

impl de::Error for FieldError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self::Other(msg.to_string())
    }

    fn missing_field(field: &'static str) -> Self {
        Self::Missing(field.to_owned())
    }
}

/// Reads a `T` from `(name, value)` pairs. Fields are read in the order `T` declares them
/// (undeclared names last, ignored), so the first one missing or not of its type is the one
/// reported, as the hand-written checks before did.
pub fn read<T: DeserializeOwned, F: FieldValue>(fields: Vec<(String, F)>) -> Result<T, FieldError> {
    T::deserialize(Fields(fields))
}

/// The value of one named field.
pub trait FieldValue: Sized {
    /// Reads the value with `seed` (the field's type); `declared`: the type has this field.
    fn read<'de, S: DeserializeSeed<'de>>(
        self,
        field: &str,
        declared: bool,
        seed: S,
    ) -> Result<S::Value, FieldError>;
}

/// A member of a JSON body. A declared string field holds at most [`MAX_TEXT`] bytes; a null
/// counts as missing where the field is not optional.
impl FieldValue for Value {
    fn read<'de, S: DeserializeSeed<'de>>(
        self,
        field: &str,
        declared: bool,
        seed: S,
    ) -> Result<S::Value, FieldError> {
        let invalid = |why: String| FieldError::Invalid {
            field: field.to_owned(),
            why,
        };
        if declared && self.as_str().is_some_and(|s| s.len() > MAX_TEXT) {
            return Err(invalid(format!("longer than {MAX_TEXT} bytes")));
        }
        let null = self.is_null();
        seed.deserialize(self).map_err(|e| {
            if null {
                FieldError::Missing(field.to_owned())
            } else {
                invalid(e.to_string())
            }
        })
    }
}

/// A query parameter: its text, read as a string or, where the field is an integer, as one
/// within `ints`.
pub struct Param {
    pub raw: String,
    pub ints: RangeInclusive<i64>,
}

impl FieldValue for Param {
    fn read<'de, S: DeserializeSeed<'de>>(
        self,
        field: &str,
        _declared: bool,
        seed: S,
    ) -> Result<S::Value, FieldError> {
        seed.deserialize(ParamValue {
            name: field,
            param: self,
        })
        .map_err(|e| match e {
            FieldError::Other(why) => FieldError::Invalid {
                field: field.to_owned(),
                why,
            },
            e => e,
        })
    }
}

struct ParamValue<'a> {
    name: &'a str,
    param: Param,
}

impl ParamValue<'_> {
    fn int(&self) -> Result<i64, FieldError> {
        let Param { raw, ints } = &self.param;
        match raw.parse::<i64>() {
            Ok(v) if ints.contains(&v) => Ok(v),
            _ => Err(FieldError::Invalid {
                field: self.name.to_owned(),
                why: format!(
                    "query parameter {}={raw:?} must be an integer from {} to {}",
                    self.name,
                    ints.start(),
                    ints.end()
                ),
            }),
        }
    }
}

impl<'de> de::Deserializer<'de> for ParamValue<'_> {
    type Error = FieldError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FieldError> {
        visitor.visit_string(self.param.raw)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FieldError> {
        visitor.visit_some(self)
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FieldError> {
        visitor.visit_i64(self.int()?)
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FieldError> {
        visitor.visit_i64(self.int()?)
    }

    /// `true` or `false` (as written by HTML forms and URLSearchParams); `1` and `0` too.
    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FieldError> {
        match self.param.raw.as_str() {
            "true" | "1" => visitor.visit_bool(true),
            "false" | "0" => visitor.visit_bool(false),
            raw => Err(FieldError::Invalid {
                field: self.name.to_owned(),
                why: format!(
                    "query parameter {}={raw:?} must be true or false",
                    self.name
                ),
            }),
        }
    }

    forward_to_deserialize_any! {
        i8 i16 i32 i128 u8 u16 u32 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

/// Named fields, read as a struct.
struct Fields<F>(Vec<(String, F)>);

impl<'de, F: FieldValue> de::Deserializer<'de> for Fields<F> {
    type Error = FieldError;

    fn deserialize_any<W: Visitor<'de>>(self, visitor: W) -> Result<W::Value, FieldError> {
        self.deserialize_struct("", &[], visitor)
    }

    fn deserialize_struct<W: Visitor<'de>>(
        self,
        _name: &'static str,
        declared: &'static [&'static str],
        visitor: W,
    ) -> Result<W::Value, FieldError> {
        let mut entries = self.0;
        entries.sort_by_key(|(name, _)| {
            declared
                .iter()
                .position(|d| d == name)
                .unwrap_or(declared.len())
        });
        visitor.visit_map(Entries {
            entries: entries.into_iter(),
            declared,
            value: None,
        })
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

struct Entries<F> {
    entries: std::vec::IntoIter<(String, F)>,
    declared: &'static [&'static str],
    /// The field whose key was read last, with its value.
    value: Option<(String, F)>,
}

impl<'de, F: FieldValue> MapAccess<'de> for Entries<F> {
    type Error = FieldError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, FieldError> {
        let Some((name, value)) = self.entries.next() else {
            return Ok(None);
        };
        let key: StrDeserializer<'_, FieldError> = name.as_str().into_deserializer();
        let key = seed.deserialize(key)?;
        self.value = Some((name, value));
        Ok(Some(key))
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, FieldError> {
        let (name, value) = self
            .value
            .take()
            .ok_or_else(|| FieldError::Other("a value without its key".into()))?;
        let declared = self.declared.contains(&name.as_str());
        value.read(&name, declared, seed)
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Body {
        name: String,
        role: String,
        owner: Option<String>,
    }

    fn body(v: Value) -> Result<Body, FieldError> {
        let Value::Object(object) = v else {
            panic!("not an object")
        };
        read(object.into_iter().collect())
    }

    fn failed(r: Result<Body, FieldError>) -> String {
        match r {
            Err(FieldError::Missing(f)) => format!("missing {f}"),
            Err(FieldError::Invalid { field, .. }) => format!("invalid {field}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reads_a_body_and_names_the_first_field_that_fails() {
        let ok = body(json!({"role": "reader", "name": "rita", "extra": [1]})).unwrap();
        assert_eq!(
            ok,
            Body {
                name: "rita".into(),
                role: "reader".into(),
                owner: None
            }
        );
        // In declaration order, whatever the order of the members.
        assert_eq!(failed(body(json!({"owner": 1, "role": 2}))), "invalid role");
        assert_eq!(failed(body(json!({"owner": 1, "name": 2}))), "invalid name");
        // Types first, then what is missing; null is missing.
        assert_eq!(failed(body(json!({"owner": 1}))), "invalid owner");
        assert_eq!(failed(body(json!({"role": "r"}))), "missing name");
        assert_eq!(
            failed(body(json!({"name": null, "role": "r"}))),
            "missing name"
        );
        assert!(body(json!({"name": "n", "role": "r", "owner": null})).is_ok());
        // A declared string is bounded; an undeclared one is ignored.
        let long = "x".repeat(MAX_TEXT + 1);
        assert_eq!(
            failed(body(json!({"name": long, "role": "r"}))),
            "invalid name"
        );
        assert!(body(json!({"name": "n", "role": "r", "note": long})).is_ok());
    }

    #[derive(Debug, Deserialize, Default, PartialEq)]
    #[serde(default)]
    struct Query {
        chain: Option<String>,
        limit: Option<i64>,
        before: Option<i64>,
        dry_run: Option<bool>,
    }

    fn query(pairs: &[(&str, &str)]) -> Result<Query, FieldError> {
        read(
            pairs
                .iter()
                .map(|(k, v)| {
                    let ints = if *k == "limit" {
                        1..=1000
                    } else {
                        1..=i64::MAX
                    };
                    let raw = (*v).to_owned();
                    ((*k).to_owned(), Param { raw, ints })
                })
                .collect(),
        )
    }

    #[test]
    fn reads_a_query_with_bounded_integers_and_flags() {
        let q = query(&[("before", "7"), ("chain", ""), ("limit", "10"), ("x", "y")]).unwrap();
        assert_eq!(
            q,
            Query {
                chain: Some(String::new()),
                limit: Some(10),
                before: Some(7),
                dry_run: None,
            }
        );
        for (raw, flag) in [("true", true), ("1", true), ("false", false), ("0", false)] {
            assert_eq!(query(&[("dry_run", raw)]).unwrap().dry_run, Some(flag));
        }
        assert_eq!(query(&[]).unwrap(), Query::default());
        for (pairs, message) in [
            (
                &[("limit", "0")][..],
                r#"query parameter limit="0" must be an integer from 1 to 1000"#,
            ),
            (
                &[("before", "x"), ("limit", "abc")][..],
                r#"query parameter limit="abc" must be an integer from 1 to 1000"#,
            ),
            (
                &[("dry_run", "yes")][..],
                r#"query parameter dry_run="yes" must be true or false"#,
            ),
            (
                &[("before", "-1")][..],
                r#"query parameter before="-1" must be an integer from 1 to 9223372036854775807"#,
            ),
        ] {
            match query(pairs) {
                Err(FieldError::Invalid { why, .. }) => assert_eq!(why, message),
                other => panic!("{pairs:?}: {other:?}"),
            }
        }
    }
}
