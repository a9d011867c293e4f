//! Placeholder: the locust parser is being written.

use super::{Ingest, IngestError, Options};

/// Whether the start of an input looks like this format.
pub fn sniff(_head: &[u8]) -> bool {
    false
}

pub fn parser(_options: &Options) -> Result<Box<dyn Ingest>, IngestError> {
    Err(IngestError::new("the locust format is not supported yet"))
}
