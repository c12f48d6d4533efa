//! Kernel component `sysinfo` (docs/design.md "Components and recovery"): what the program learns about
//! the machine: `uname`, `sysinfo`, and randomness (`getrandom`).
//!
//! `uname` reports a Linux system, because the program is a Linux program
//! (musl and applications check `sysname`/`release`, e.g. for features by
//! kernel version): sysname `Linux`, release [`RELEASE`] (a 6.1 kernel's
//! ABI, marked as shoal), version `#1 shoal`, machine `x86_64`, the host
//! name from the boot information (or `shoal` if it gives none) until the
//! program sets its own (`sethostname`), domain name `(none)` as Linux has
//! by default.
//!
//! `getrandom` is a ChaCha20 CSPRNG (`rand_chacha`) seeded from the 32
//! random bytes the tender puts in the boot information, and seeded again
//! whenever those bytes change: an spt template's copies (forks of one
//! booted instance) each get fresh ones, so no two copies draw the same
//! stream.
#![cfg_attr(not(test), no_std)]

pub mod sys;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use shoal_plat::Global;

/// `uname` release.
pub const RELEASE: &str = "6.1.0-shoal";
/// `uname` version.
pub const VERSION: &str = "#1 shoal";

/// A host name the program set (`sethostname`), which replaces the boot
/// information's; `None`: not set. A reboot of this component (only under
/// `--rejuvenate-every` or after a fault) forgets it, as it forgets
/// nothing else the program cannot see again.
static HOSTNAME: Global<Option<[u8; 64]>> = Global::new(None);

/// The host name `uname` reports (NUL padded): the one the program set,
/// else the tender's (`--hostname`).
pub fn hostname() -> [u8; 64] {
    HOSTNAME.with(|h| *h).unwrap_or(shoal_plat::boot::info().hostname)
}

/// Sets the host name (`sethostname`).
pub fn set_hostname(name: [u8; 64]) {
    HOSTNAME.with(|h| *h = Some(name));
}

static RNG: Global<Option<ChaCha20Rng>> = Global::new(None);
/// The seed `RNG` was made from.
static SEED: Global<[u8; 32]> = Global::new([0; 32]);

/// Seeds the random generator from the boot information.
pub fn init() {
    let seed = shoal_plat::boot::info().random_seed;
    SEED.with(|s| *s = seed);
    RNG.with(|r| *r = Some(ChaCha20Rng::from_seed(seed)));
}

/// Runs after `recover` restored this component's post-initialisation
/// snapshot for the `n`-th time: the generator is back at its first
/// output, so it moves to stream `n` (ChaCha20's 64-bit stream number)
/// of the same key: the bytes after a reboot never repeat earlier ones.
pub fn after_reboot(n: u64) {
    RNG.with(|r| {
        if let Some(r) = r {
            r.set_stream(n);
        }
    });
}

/// Fills `buf` with random bytes. Before `init` (host tests only) the
/// generator is seeded with zeros.
pub fn fill_random(buf: &mut [u8]) {
    let live = shoal_plat::boot::live_random_seed();
    let fresh = SEED.with(|s| {
        let changed = *s != live;
        *s = live;
        changed
    });
    RNG.with(|r| {
        if fresh {
            // The stream number stays: `after_reboot`'s rule holds for
            // the new key too.
            let stream = r.as_ref().map_or(0, ChaCha20Rng::get_stream);
            let mut new = ChaCha20Rng::from_seed(live);
            new.set_stream(stream);
            *r = Some(new);
        }
        r.get_or_insert_with(|| ChaCha20Rng::from_seed([0; 32])).fill_bytes(buf)
    });
}
