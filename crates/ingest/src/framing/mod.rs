//! Framing shared by the formats: splitting pushed chunks into lines ([`lines`]), CSV records
//! ([`csv`]) and a bounded JSON document read without a tree ([`json`]). A format borrows its
//! framing from here, never from another format.

pub(crate) mod csv;
pub(crate) mod json;
pub(crate) mod lines;
