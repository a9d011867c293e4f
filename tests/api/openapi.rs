//! The OpenAPI document (being written).
