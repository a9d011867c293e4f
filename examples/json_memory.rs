//! What a JSON request body takes once parsed: the server reads every JSON body into a
//! `serde_json::Value`, and charges an estimate of what that takes before it parses
//! (`budgetd::http::json_cost`; docs/limits.md, "What this bounds"). For 4 MiB bodies of a few
//! shapes, this prints how much the process's resident memory grew with the parsed value
//! held, and at its peak while parsing, as multiples of the body's bytes: each shape is parsed
//! in a process of its own (this program run again), from a body made before the count starts.
//! Beside them, the server's estimate, which is to be no smaller than what is held. It runs
//! on the server's allocator (jemalloc); the layout, and so the figures, are the same with
//! `--release`.
//!
//! ```sh
//! cargo run --example json_memory
//! ```

/// The server's allocator (src/bin/budgetd.rs), so that the figures are the server's.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The process's resident memory now and at its peak, in bytes (`VmRSS`, `VmHWM`).
fn resident() -> (usize, usize) {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib = |key: &str| -> usize {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("a size in kB")
    };
    (kib("VmRSS:") * 1024, kib("VmHWM:") * 1024)
}

/// A JSON array of `item` repeated until it is about `bytes` long.
fn array_of(item: &str, bytes: usize) -> Vec<u8> {
    let mut body = format!("[{item}");
    while body.len() < bytes {
        body.push(',');
        body.push_str(item);
    }
    body.push(']');
    body.into_bytes()
}

/// One JSON object of distinct short keys, about `bytes` long.
fn object_of_keys(bytes: usize) -> Vec<u8> {
    let mut body = String::from("{\"k0\":1");
    let mut i = 1;
    while body.len() < bytes {
        body.push_str(&format!(",\"k{i:x}\":1"));
        i += 1;
    }
    body.push('}');
    body.into_bytes()
}

fn shapes(bytes: usize) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("small numbers: [1,1,…]", array_of("1", bytes)),
        ("empty arrays: [[],[],…]", array_of("[]", bytes)),
        ("short strings: [\"ab\",…]", array_of("\"ab\"", bytes)),
        (
            "one-key objects: [{\"a\":1},…]",
            array_of("{\"a\":1}", bytes),
        ),
        (
            "four-key objects",
            array_of("{\"a\":1,\"b\":2,\"c\":\"x\",\"d\":[]}", bytes),
        ),
        ("one object, many keys", object_of_keys(bytes)),
        (
            "strings of 16,385 bytes",
            array_of(&format!("\"{}\"", "a".repeat(16_385)), bytes),
        ),
    ]
}

fn main() {
    let bytes = 4 << 20;
    let Some(index) = std::env::args().nth(1) else {
        println!(
            "bodies of about {bytes} bytes; resident memory parsed, held / peak, and the \
             server's estimate, as multiples of the body"
        );
        let me = std::env::current_exe().expect("this program's path");
        for i in 0..shapes(0).len() {
            let out = std::process::Command::new(&me)
                .arg(i.to_string())
                .output()
                .expect("this program run again");
            print!("{}", String::from_utf8_lossy(&out.stdout));
        }
        return;
    };
    let index: usize = index.parse().expect("a shape's number");
    let (name, body) = shapes(bytes).swap_remove(index);
    // The peak counts from here.
    std::fs::write("/proc/self/clear_refs", "5").expect("/proc/self/clear_refs");
    let (before, _) = resident();
    let value: serde_json::Value = serde_json::from_slice(&body).expect("valid JSON");
    let (held, peak) = resident();
    drop(value);
    let times = |n: usize| n.saturating_sub(before) as f64 / body.len() as f64;
    let estimate = budgetd::http::json_cost::parsed_bytes(&body) as f64 / body.len() as f64;
    println!(
        "{name:32} {:5.1}x / {:5.1}x   estimate {estimate:5.1}x",
        times(held),
        times(peak)
    );
}
