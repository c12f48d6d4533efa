//! Fuzzes the image checks: `Image::parse` must refuse or accept any input
//! without panicking, and what it accepts must satisfy its promises.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok(img) = shoal_loader::Image::parse(Path::new("fuzz.img"), data) {
        let segs = img.segments();
        assert!(!segs.is_empty());
        for s in segs {
            assert!(s.vaddr >= shoal_abi_base());
            assert!(s.filesz <= s.memsz);
            assert!(img.segment_bytes(s).is_ok_and(|b| b.len() as u64 == s.filesz));
            assert!(!(s.perms.write && s.perms.exec));
        }
        for w in segs.windows(2) {
            assert!(w[0].page_end() <= w[1].page_start());
        }
        assert!(img.phdrs().len() as u64 == img.phnum() * shoal_loader::PHDR_SIZE);
    }
});

fn shoal_abi_base() -> u64 {
    0x100000
}
