//! Any bytes as version 2 of a library whose version 1 is a valid empty
//! object: `make_deltas` returns an error or a delta set, never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("shoal-delta-fuzz-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let v2 = dir.join("v2.o");
    if std::fs::write(&v2, data).is_err() {
        return;
    }
    // Version 1 is the same bytes: the reader and the comparison both run.
    let inputs = vec![("1".to_string(), v2.clone()), ("2".to_string(), v2)];
    let _ = shoal_delta::make_deltas(&inputs, &dir.join("out"));
});
