//! Any bytes: `Archive::parse` returns an error or an archive whose every
//! entry can be read back without panicking.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(a) = shoal_archive::Archive::parse(data) {
        for e in a.entries() {
            let _ = a.find(e.path);
            let _ = e.data.len();
        }
    }
});
