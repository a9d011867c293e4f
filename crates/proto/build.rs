//! Generates the budget.v1 code with protox (pure Rust): no system `protoc` needed.
//!
//! Two generations: `budget.proto` (messages, client, server; the public protocol) and
//! `wire/budget/v1/server_wire.proto` (the server's encode-once view of the same service, kept
//! out of `proto/` so that every file there compiles together) into `OUT_DIR/wire`.

use std::path::PathBuf;

#[allow(clippy::disallowed_methods)] // a build script reads OUT_DIR from its environment
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `proto/` holds the public contract only; the server's wire twin lives with this crate.
    let proto_dir = "../../proto";
    let wire_dir = "wire";
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed={proto_dir}/budget/v1/budget.proto");
    println!("cargo:rerun-if-changed={wire_dir}/budget/v1/server_wire.proto");

    let public = protox::compile(["budget/v1/budget.proto"], [proto_dir])?;
    std::fs::write(out.join("budget_v1_descriptor.bin"), encode(&public))?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(public)?;

    let wire = protox::compile(["budget/v1/server_wire.proto"], [wire_dir])?;
    std::fs::write(out.join("server_wire_descriptor.bin"), encode(&wire))?;
    let wire_out = out.join("wire");
    std::fs::create_dir_all(&wire_out)?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(false)
        .bytes(".")
        // Small per-call buffers: a Watch stream lives as long as its agent.
        .codec_path("crate::codec::SmallBufferCodec")
        .out_dir(&wire_out)
        .compile_fds(wire)?;
    Ok(())
}

fn encode(fds: &protox::prost_reflect::prost_types::FileDescriptorSet) -> Vec<u8> {
    use protox::prost_reflect::prost::Message;
    fds.encode_to_vec()
}
