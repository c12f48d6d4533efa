//! Fuzzes hvt's hypercall dispatch without a VM (`shoal_hvt::fuzz`): up
//! to eight port writes with random hypercall numbers and argument
//! addresses over guest memory holding the rest of the input at
//! `HEAP_START` (argument structures, `Net` batches and their socket
//! handles, `Protect`/`Alias`/`Release` requests and lists, which rewrite
//! the real page tables), each from CPL 3 or CPL 0. The handlers must
//! answer, refuse or stop the guest, never panic or crash.
//!
//! Input: byte 0 is the number of calls (mod 9), then per call one byte of
//! hypercall number (the port's offset; bit 7: from CPL 0 in the
//! exception stub) and four bytes (little-endian) of argument; the rest is
//! guest memory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_hvt::fuzz::{Action, Harness};
use std::sync::Mutex;

static HARNESS: Mutex<Option<Harness>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let mut guard = HARNESS.lock().unwrap_or_else(|e| e.into_inner());
    let h = guard.get_or_insert_with(|| {
        let h = Harness::new().unwrap_or_else(|e| panic!("{e}"));
        if !h.network {
            eprintln!("shoal-hvt fuzz: no network namespace of its own (not root?): guest networking is off");
        }
        h
    });
    let Some((&n, rest)) = data.split_first() else { return };
    let n = usize::from(n % 9);
    if rest.len() < n * 5 {
        return;
    }
    let (calls, blob) = rest.split_at(n * 5);
    h.reset(blob);
    for c in calls.chunks_exact(5) {
        let cpl = if c[0] & 0x80 != 0 { 0 } else { 3 };
        let nr = u16::from(c[0] & 0x7f);
        let arg = u32::from_le_bytes([c[1], c[2], c[3], c[4]]);
        match h.call(nr, arg, cpl) {
            Action::Continue => {}
            Action::Halt(_) | Action::Fault(_) | Action::BlockedForever | Action::Refused(_) | Action::Stopped(_) => {
                h.drain();
                break;
            }
        }
    }
});
