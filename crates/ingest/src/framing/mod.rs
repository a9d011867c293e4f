//! Framing shared by the formats: splitting pushed chunks into lines ([`lines`]), CSV records
//! ([`csv`]) and a bounded JSON document read without a tree ([`json`]), and the gzip stream
//! an upload may come in ([`gzip`]). A format borrows its
//! framing from here, never from another format.

pub(crate) mod csv;
pub(crate) mod gzip;
pub(crate) mod json;
pub(crate) mod lines;
