//! Typed reading of a JSON summary without a tree: [`Fold`] state folded member by member,
//! [`Skip`] for what is validated and dropped, [`Scalar`] for the leaves a parser reads.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Number;

/// State folded from the members of a JSON object, one member at a time.
pub(crate) trait Fold: Default {
    /// Reads the member `key`: its value must be taken from `map` exactly once (as a typed value,
    /// or as [`Skip`] when it is not needed).
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error>;
}

/// A JSON value that is read as `T` when it is an object, and otherwise only told apart as
/// `null` or something else (what a parser needs to say "must be an object").
#[derive(Debug)]
pub(crate) enum Obj<T> {
    Object(T),
    Null,
    Other,
}

impl<'de, T: Fold> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);

        impl<'de, T: Fold> Visitor<'de> for V<T> {
            type Value = Obj<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_unit<E>(self) -> Result<Obj<T>, E> {
                Ok(Obj::Null)
            }

            fn visit_bool<E>(self, _: bool) -> Result<Obj<T>, E> {
                Ok(Obj::Other)
            }

            fn visit_i64<E>(self, _: i64) -> Result<Obj<T>, E> {
                Ok(Obj::Other)
            }

            fn visit_u64<E>(self, _: u64) -> Result<Obj<T>, E> {
                Ok(Obj::Other)
            }

            fn visit_f64<E>(self, _: f64) -> Result<Obj<T>, E> {
                Ok(Obj::Other)
            }

            fn visit_str<E>(self, _: &str) -> Result<Obj<T>, E> {
                Ok(Obj::Other)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Obj<T>, A::Error> {
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(Obj::Other)
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Obj<T>, A::Error> {
                let mut state = T::default();
                while let Some(key) = map.next_key::<String>()? {
                    state.member(key, &mut map)?;
                }
                Ok(Obj::Object(state))
            }
        }

        d.deserialize_any(V(PhantomData))
    }
}

/// Any JSON value, validated as a `serde_json::Value` parse validates it, then dropped. Unlike
/// `serde::de::IgnoredAny` (which skips strings without checking their UTF-8 and escapes), this
/// refuses exactly what a `Value` parse refuses. Nesting is bounded by serde_json's recursion
/// limit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;

        impl<'de> Visitor<'de> for V {
            type Value = Skip;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_unit<E>(self) -> Result<Skip, E> {
                Ok(Skip)
            }

            fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
                Ok(Skip)
            }

            fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
                Ok(Skip)
            }

            fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
                Ok(Skip)
            }

            fn visit_f64<E>(self, _: f64) -> Result<Skip, E> {
                Ok(Skip)
            }

            fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
                Ok(Skip)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(Skip)
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
                while map.next_entry::<Skip, Skip>()?.is_some() {}
                Ok(Skip)
            }
        }

        d.deserialize_any(V)
    }
}

/// A JSON value a parser reads as a leaf: a number, a string, `null`, a boolean; arrays and
/// objects are validated and dropped, only their kind is kept.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar {
    Null,
    Bool(bool),
    Number(Number),
    Str(String),
    Array,
    Object,
}

impl Scalar {
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            Self::Number(n) => n.as_f64(),
            _ => None,
        }
    }

    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self {
            Self::Number(n) => n.as_u64(),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// As JSON, like `serde_json::Value`'s `Display` (arrays and objects shortened to `[…]`, `{…}`).
impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Null => f.write_str("null"),
            Self::Bool(b) => write!(f, "{b}"),
            Self::Number(n) => write!(f, "{n}"),
            Self::Str(s) => f.write_str(&serde_json::to_string(s).map_err(|_| fmt::Error)?),
            Self::Array => f.write_str("[…]"),
            Self::Object => f.write_str("{…}"),
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;

        impl<'de> Visitor<'de> for V {
            type Value = Scalar;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }

            fn visit_bool<E>(self, b: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(b))
            }

            fn visit_i64<E>(self, n: i64) -> Result<Scalar, E> {
                Ok(Scalar::Number(n.into()))
            }

            fn visit_u64<E>(self, n: u64) -> Result<Scalar, E> {
                Ok(Scalar::Number(n.into()))
            }

            fn visit_f64<E>(self, x: f64) -> Result<Scalar, E> {
                // As serde_json's `Value`: a float that is not finite becomes null.
                Ok(Number::from_f64(x).map_or(Scalar::Null, Scalar::Number))
            }

            fn visit_str<E>(self, s: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(s.to_owned()))
            }

            fn visit_string<E>(self, s: String) -> Result<Scalar, E> {
                Ok(Scalar::Str(s))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(Scalar::Array)
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
                while map.next_entry::<Skip, Skip>()?.is_some() {}
                Ok(Scalar::Object)
            }
        }

        d.deserialize_any(V)
    }
}

/// Takes the value of the current member without keeping it.
pub(crate) fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<Skip>().map(|Skip| ())
}

/// Whether `key` goes in `slot`, which keeps the first key in key order among the members it
/// is offered (the order a `BTreeMap`, such as a `serde_json::Map`, iterates them in). A repeated
/// key is taken again: its last value wins, as in a `serde_json::Map`.
pub(crate) fn first_in_key_order<T>(slot: &Option<(String, T)>, key: &str) -> bool {
    slot.as_ref().is_none_or(|(k, _)| key <= k.as_str())
}
