//! Any bytes as a Linux executable: `analyse` (the ELF checks, the decode
//! of every executable section and the plan of which system-call sites are
//! rewritten) returns an error or a description and never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = shoal_exec::is_linux_executable(data);
    let _ = shoal_exec::analyse(std::path::Path::new("fuzz"), data);
});
