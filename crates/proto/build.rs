//! Generates the budget.v1 code with protox (pure Rust): no system `protoc` needed.

#[allow(clippy::disallowed_methods)] // a build script reads OUT_DIR from its environment
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = "../../proto";
    let file = "budget/v1/budget.proto";
    println!("cargo:rerun-if-changed={proto_dir}/{file}");
    let fds = protox::compile([file], [proto_dir])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("budget_v1_descriptor.bin"), prost_encode(&fds))?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}

fn prost_encode(fds: &protox::prost_reflect::prost_types::FileDescriptorSet) -> Vec<u8> {
    use protox::prost_reflect::prost::Message;
    fds.encode_to_vec()
}
