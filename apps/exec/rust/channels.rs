//! channels: a static Rust program (built by the tests with
//! `rustc -C target-feature=+crt-static`) using threads, a channel and a
//! HashMap; prints its arguments and exits 5.
use std::collections::HashMap;
use std::sync::mpsc;
use std::thread;

fn main() {
    let (tx, rx) = mpsc::channel();
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let tx = tx.clone();
            thread::spawn(move || {
                for j in 0..1000 {
                    tx.send((i, j)).expect("the receiver lives until every sender is gone");
                }
            })
        })
        .collect();
    drop(tx);
    let mut sums: HashMap<i32, i64> = HashMap::new();
    for (i, j) in rx {
        *sums.entry(i).or_default() += j;
    }
    for w in workers {
        w.join().expect("a worker panicked");
    }
    let mut v: Vec<_> = sums.into_iter().collect();
    v.sort();
    println!("{:?} {:?}", v, std::env::args().skip(1).collect::<Vec<_>>());
    std::process::exit(5);
}
