//! `shoal-spt`: the spt instance program. Not run by hand: `shoal run`
//! and `shoal-tender` (through `shoal_spt::run`) `exec` it with an empty
//! environment and the boot spec on descriptor 3, so that the process a
//! guest shares its address space with starts clean (see
//! `shoal_spt::instance`).

fn main() {
    shoal_spt::instance::main()
}
