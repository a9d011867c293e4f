//! budget-proto: the `budget.v1` gRPC protocol and conversions from and to `budget-core` types.
#![forbid(unsafe_code)]

/// Generated messages, client and server of `budget.v1`.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("budget.v1");
}

/// The encoded file descriptor set, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("budget_v1_descriptor");

pub mod convert;
