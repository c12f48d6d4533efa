//! `shoal pool`: the library pool of shared read-only library pages (`shoal_loader::pool`).

use anyhow::Result;
use clap::Subcommand;
use shoal_loader::pool::Pool;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum PoolCmd {
    /// Put the read-only pages of each library version of the images into the pool.
    Add {
        /// The images (their manifests must be next to them).
        #[arg(required = true)]
        images: Vec<PathBuf>,
    },
    /// List the pool's files, their sizes and how many processes map them.
    Ls,
    /// Remove the pool files no process maps.
    Gc,
}

fn mib(b: u64) -> String {
    format!("{:.2} MiB", b as f64 / (1 << 20) as f64)
}

pub fn run(cmd: PoolCmd) -> Result<()> {
    let pool = Pool::default_pool();
    match cmd {
        PoolCmd::Add { images } => {
            // `shoal pool add out/*` also names the manifests: each image once.
            for image in shoal_manifest::Manifest::images_named(&images) {
                let added = pool.add(&image)?;
                let new: u64 = added.iter().filter(|a| a.written).map(|a| a.bytes).sum();
                let kept = added.iter().filter(|a| !a.written).count();
                println!("{}: {} pool files, {} new in the pool, {} already there", image.display(), added.len(), mib(new), kept);
            }
        }
        PoolCmd::Ls => {
            let entries = pool.list()?;
            println!("{} ({} files, {})", pool.dir().display(), entries.len(), mib(entries.iter().map(|e| e.bytes).sum()));
            for e in entries {
                println!("{:>12} {:>4} mapped  {}", mib(e.bytes), e.mapped_by, e.name);
            }
        }
        PoolCmd::Gc => {
            let removed = pool.gc()?;
            println!("removed {} files ({})", removed.len(), mib(removed.iter().map(|e| e.bytes).sum()));
        }
    }
    Ok(())
}
