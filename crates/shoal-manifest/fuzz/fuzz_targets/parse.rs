//! Any bytes: `Manifest::parse` returns an error or a manifest, never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = shoal_manifest::Manifest::parse(std::path::Path::new("fuzz"), data);
});
