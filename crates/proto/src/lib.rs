//! budget-proto: the `budget.v1` gRPC protocol and conversions from and to `budget-core` types.
#![forbid(unsafe_code)]

/// Generated messages, client and server of `budget.v1`.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("budget.v1");
}

/// The server's encode-once view of `BudgetControl` (see `crates/proto/wire/budget/v1/server_wire.proto`):
/// the same RPCs on the wire, but `BudgetUpdate.chains` are pre-encoded `v1::ChainBudget`s.
#[allow(clippy::all, missing_docs)]
pub mod wire {
    include!(concat!(env!("OUT_DIR"), "/wire/budget.v1.rs"));
}

/// The encoded file descriptor set, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("budget_v1_descriptor");

pub mod bounds;
pub mod codec;
pub mod convert;

#[cfg(test)]
mod wire_tests {
    //! `server_wire.proto` must stay wire-identical to `budget.proto`.
    use prost::Message;
    use prost_types::{field_descriptor_proto::Type, FileDescriptorSet};

    use super::{v1, wire};

    const WIRE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("server_wire_descriptor");

    fn file(bytes: &[u8]) -> prost_types::FileDescriptorProto {
        FileDescriptorSet::decode(bytes)
            .unwrap()
            .file
            .into_iter()
            .next()
            .unwrap()
    }

    #[test]
    fn shared_messages_and_service_are_identical() {
        let public = file(super::FILE_DESCRIPTOR_SET);
        let server = file(WIRE_DESCRIPTOR_SET);
        assert_eq!(public.package, server.package);
        let msg = |f: &prost_types::FileDescriptorProto, name: &str| {
            f.message_type
                .iter()
                .find(|m| m.name() == name)
                .cloned()
                .unwrap_or_else(|| panic!("{name} missing"))
        };
        for name in [
            "WatchRequest",
            "AckRequest",
            "AckResponse",
            "ReportRequest",
            "SegmentWindow",
            "ReportResponse",
        ] {
            assert_eq!(
                msg(&public, name),
                msg(&server, name),
                "{name} differs between the two protos"
            );
        }
        let (p, s) = (msg(&public, "BudgetUpdate"), msg(&server, "BudgetUpdate"));
        assert_eq!(p.field.len(), s.field.len());
        for (a, b) in p.field.iter().zip(&s.field) {
            assert_eq!((a.number, a.name(), a.label), (b.number, b.name(), b.label));
            match a.r#type() {
                Type::Message => assert_eq!(
                    b.r#type(),
                    Type::Bytes,
                    "{} must be bytes on the server",
                    a.name()
                ),
                t => assert_eq!(t, b.r#type()),
            }
        }
        let methods = |f: &prost_types::FileDescriptorProto| {
            f.service[0]
                .method
                .iter()
                .map(|m| (m.name().to_owned(), m.server_streaming()))
                .collect::<Vec<_>>()
        };
        assert_eq!(public.service[0].name(), server.service[0].name());
        assert_eq!(methods(&public), methods(&server));
    }

    #[test]
    fn pre_encoded_chains_decode_as_chain_budgets() {
        let chain = v1::ChainBudget {
            chain: "checkout".into(),
            baseline_id: "bl-20261130-001".into(),
            revision: 3,
            entry_budget_ms: 800,
            segments: vec![v1::SegmentBudget {
                id: "order->user".into(),
                timeout_ms: 9,
                budget_ms: 9,
                ..Default::default()
            }],
            ..Default::default()
        };
        let sent = wire::BudgetUpdate {
            revision: 3,
            chains: vec![chain.encode_to_vec().into()],
        };
        let got = v1::BudgetUpdate::decode(sent.encode_to_vec().as_slice()).unwrap();
        assert_eq!(
            got,
            v1::BudgetUpdate {
                revision: 3,
                chains: vec![chain]
            }
        );
    }
}
