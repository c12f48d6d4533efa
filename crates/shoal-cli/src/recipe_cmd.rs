//! `shoal recipe`: real programs built from Debian source packages (see
//! `shoal_toolchain::recipe` and `recipes/`).

use anyhow::{bail, Result};
use clap::Subcommand;
use shoal_toolchain::recipe;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum RecipeCmd {
    /// List the recipes.
    List,
    /// Fetch the Debian sources and compile the recipes (all if none is named) into the cache, without linking images.
    Fetch {
        /// Recipes to prepare.
        names: Vec<String>,
    },
    /// Build a recipe's image (`-o`), its native static musl twin (`--native`) or its library alone (`--lib-only`).
    Build {
        /// The recipe (see `shoal recipe list`).
        name: String,
        /// The image to write.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Also copy the native static musl program built from the same sources here.
        #[arg(long, value_name = "FILE")]
        native: Option<PathBuf>,
        /// Write the recipe's library alone (lib<name>.a, obj/, library.json) into DIR.
        #[arg(long, value_name = "DIR")]
        lib_only: Option<PathBuf>,
    },
}

pub fn run(cmd: RecipeCmd) -> Result<()> {
    let paths = shoal_toolchain::Paths::discover()?;
    match cmd {
        RecipeCmd::List => {
            for r in recipe::list(&paths)? {
                let lib = match &r.library {
                    Some(l) => format!("{} {} (Debian source {})", l.name, l.version, l.package),
                    None => "-".to_string(),
                };
                println!("{:<18} {:<36} {}", r.name, lib, r.description);
            }
        }
        RecipeCmd::Fetch { names } => {
            let recipes =
                if names.is_empty() { recipe::list(&paths)? } else { names.iter().map(|n| recipe::load(&paths, n)).collect::<Result<Vec<_>, _>>()? };
            for r in recipes {
                let t = std::time::Instant::now();
                recipe::prepare(&paths, &r)?;
                eprintln!("shoal: recipe {} ready ({:.1}s)", r.name, t.elapsed().as_secs_f64());
            }
        }
        RecipeCmd::Build { name, output, native, lib_only } => {
            if output.is_none() && lib_only.is_none() && native.is_none() {
                bail!("shoal recipe build {name}: say what to write: -o IMAGE, --native FILE and/or --lib-only DIR");
            }
            let r = recipe::load(&paths, &name)?;
            if let Some(dir) = &lib_only {
                let lib = recipe::export_library(&paths, &r, dir)?;
                eprintln!("shoal: library {}@{} in {}", lib.name, lib.version, dir.display());
            }
            if output.is_some() || native.is_some() {
                let tmp = tempfile::tempdir()?;
                let image = output.clone().unwrap_or_else(|| tmp.path().join("image"));
                let built = recipe::build(&paths, &r, &image)?;
                if let Some(n) = &native {
                    std::fs::copy(&built.native, n).map_err(|e| anyhow::anyhow!("cannot write the native program {}: {e}", n.display()))?;
                }
            }
        }
    }
    Ok(())
}
