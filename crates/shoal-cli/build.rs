//! Asks for `shoal-tender` (the program every instance starts) to be linked
//! static-pie (scripts/rust-link, the workspace's linker, says why); the
//! marker is an unused absolute symbol for any other linker. `shoal`
//! itself is linked as rustc links it.

fn main() {
    println!("cargo:rustc-link-arg-bin=shoal-tender=-Wl,--defsym=SHOAL_LINK_STATIC=0");
}
