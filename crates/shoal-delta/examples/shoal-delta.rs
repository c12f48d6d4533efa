//! Stand-alone driver until `shoal delta` exists:
//! `cargo run -p shoal-delta --example shoal-delta -- --versions a,b --out DIR a.o b.o`.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let t = std::time::Instant::now();
    match shoal_delta::cli_main(&args) {
        Ok(s) => {
            print!("{s}");
            println!("done in {:.2} s", t.elapsed().as_secs_f64())
        }
        Err(e) => {
            eprintln!("shoal-delta: {e}");
            std::process::exit(1);
        }
    }
}
