//! One module per load tool, each a push parser ([`crate::Ingest`]) with a `sniff` (does the
//! start of an input look like this tool's output?) and a `parser` constructor; [`unsupported`]
//! names the files budgetd does not read.

pub mod artillery;
pub mod autocannon;
pub mod hlog;
pub mod jmeter;
pub mod k6;
pub mod locust;
pub mod oha;
pub mod unsupported;
pub mod wrk2;
