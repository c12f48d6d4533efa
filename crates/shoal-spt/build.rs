//! Asks for the instance program `shoal-spt` to be linked static at a fixed
//! high address (scripts/rust-link, the workspace's linker, says how and
//! why); the marker is an unused absolute symbol for any other linker.

fn main() {
    println!("cargo:rustc-link-arg-bin=shoal-spt=-Wl,--defsym=SHOAL_LINK_STATIC_HIGH=0");
}
