//! Any bytes as an image: `Manifest::describe` returns an error or a
//! manifest, never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;
use shoal_manifest::{LibraryInfo, LibraryKind};

fuzz_target!(|data: &[u8]| {
    let libs = [LibraryInfo { name: "app".into(), version: "0".into(), kind: LibraryKind::App }];
    let _ = shoal_manifest::Manifest::describe(std::path::Path::new("fuzz"), data, &libs, "default");
});
