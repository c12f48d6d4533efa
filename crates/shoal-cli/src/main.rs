//! `shoal`: the command line of the shoal unikernel platform.
//!
//! Subcommands map onto the crates (see docs/architecture.md): `cc` and
//! `build` onto `shoal-toolchain`, `run` onto the tenders (`shoal-tender`),
//! `serve` and `fn` onto `shoal-serve`, `bench` onto `shoal-bench`. Every error is printed as one
//! line, `shoal: …`, on stderr, and shoal exits with status 125 (as
//! container runtimes do for their own failures), so that statuses 0–124 and
//! 128+N belong to the program that ran.

mod exec_cmd;
mod oci_image;
mod pool_cmd;
mod recipe_cmd;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit status for shoal's own errors.
const EXIT_SHOAL_ERROR: u8 = 125;

#[derive(Parser)]
#[command(name = "shoal", version, about = "Build and run unikernels: C programs linked with a Rust library OS")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Compile and link C for shoal; takes gcc's arguments (`shoal cc -O2 -o hello hello.c`).
    #[command(disable_help_flag = true)]
    Cc {
        /// gcc-style arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Link prepared objects and libraries into an image and its manifest,
    /// or every image of a workspace (`--workspace W.toml`) under its layout policy.
    Build {
        /// The image to write.
        #[arg(short, long, required_unless_present = "workspace")]
        output: Option<PathBuf>,
        /// Layout policy for a single image: aligned (default), default or dce.
        #[arg(long, default_value = "aligned")]
        layout: String,
        /// An application library: NAME@VERSION=ARCHIVE.a or NAME@VERSION=OBJECT.o (repeatable).
        #[arg(long = "lib", value_name = "NAME@VERSION=FILE")]
        libs: Vec<String>,
        /// A workspace file: build all its images together.
        #[arg(long, conflicts_with_all = ["output", "objects", "libs"])]
        workspace: Option<PathBuf>,
        /// The application's object files.
        #[arg(required_unless_present = "workspace")]
        objects: Vec<PathBuf>,
    },
    /// The Δ-versioner: `shoal delta --versions V1,V2,… --out DIR [--namespace NS] OBJ1 OBJ2 …`
    /// writes base.o and one delta object per later version.
    #[command(disable_help_flag = true)]
    Delta {
        /// --versions, --out, --namespace and the objects, oldest first.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Count the distinct 4 KiB frames of code and rodata a set of images needs when identical pages are shared.
    Pages {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// The images (their manifests must be next to them).
        #[arg(required = true)]
        images: Vec<PathBuf>,
    },
    /// Run an image: `shoal run [OPTIONS] IMAGE [-- ARGS…]`.
    Run {
        /// The run options, shared with `shoal-tender`.
        #[command(flatten)]
        opts: shoal_tender::RunOpts,
        /// The image.
        image: PathBuf,
        /// Arguments for the program (after `--`).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Build shoal's libc and kernel now (otherwise done on first use).
    Setup,
    /// Print an image's manifest summary: libraries, versions, regions.
    Inspect {
        /// The image.
        image: PathBuf,
    },
    /// Pack an image as an OCI image archive for `podman load` / `ctr images import` (run by shoal-oci).
    OciImage {
        /// The shoal image, or a static Linux executable (packed as the instance image built around it); it becomes the entrypoint /NAME-OF-IMAGE.
        image: PathBuf,
        /// The image's name: NAME[:TAG] (localhost/ and :latest when left out).
        #[arg(short = 't', long = "tag")]
        tag: String,
        /// A directory whose contents become the rest of the root file system.
        #[arg(long)]
        fs: Option<PathBuf>,
        /// The archive to write (default NAME_TAG.oci.tar).
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
    },
    /// Benchmarks (never tests): each runs shoal and its comparison side by side.
    Bench {
        #[command(subcommand)]
        which: shoal_bench::Bench,
    },
    /// The library pool in /dev/shm, read-only library pages shared between instances: `shoal pool add IMAGE…`, `shoal pool ls`, `shoal pool gc`.
    Pool {
        #[command(subcommand)]
        which: pool_cmd::PoolCmd,
    },
    /// The cache of executables' built instance images (~/.cache/shoal/exec): `shoal cache prune [--max SIZE]`.
    Cache {
        #[command(subcommand)]
        which: exec_cmd::CacheCmd,
    },
    /// Real programs built from Debian source packages: `shoal recipe list`, `shoal recipe build NAME -o IMAGE`.
    Recipe {
        #[command(subcommand)]
        which: recipe_cmd::RecipeCmd,
    },
    /// The FaaS gateway: `shoal serve [--listen ADDR:PORT] [--state DIR] [--allow-path DIR]…` starts function instances on demand.
    Serve {
        /// Where the API and invocations are served (loopback unless --insecure-listen).
        #[arg(long, default_value = shoal_serve::DEFAULT_LISTEN)]
        listen: String,
        /// Where deployed functions and the API token (`token`) are kept (default $XDG_STATE_HOME/shoal/serve or ~/.local/state/shoal/serve).
        #[arg(long)]
        state: Option<PathBuf>,
        /// Allow a --listen address other than loopback (plain HTTP: the token crosses the network unencrypted).
        #[arg(long)]
        insecure_listen: bool,
        /// Allow the `process` backend, which runs a function's program unsandboxed as the gateway's user (for comparisons).
        #[arg(long)]
        allow_process: bool,
        /// A directory beneath which deploys may name `image` and `fs` paths (repeatable; uploads are always allowed).
        #[arg(long = "allow-path", value_name = "DIR")]
        allow_path: Vec<PathBuf>,
        /// Require the token for /fn/NAME invocations too (by default only the management API needs it).
        #[arg(long)]
        auth_invoke: bool,
        /// The most bytes all uploaded images together may hold (e.g. 2G).
        #[arg(long, default_value = "2G")]
        upload_quota: String,
        /// As root: each spt instance runs as a uid and gid of its own from START..START+COUNT-1 (as `shoal run --uid-range`; default: every instance runs as nobody).
        #[arg(long, value_name = "START:COUNT")]
        uid_range: Option<String>,
    },
    /// Functions on a running gateway: `shoal fn deploy|ls|rm|logs|invoke`.
    Fn {
        /// The gateway: http://HOST:PORT, HOST:PORT or localhost:PORT (before or after the subcommand).
        #[arg(long, global = true, env = "SHOAL_GATEWAY", default_value = concat!("http://", "127.0.0.1:8640"))]
        gateway: String,
        /// The gateway's API token (default: $SHOAL_TOKEN, else the `token` file of --state for a gateway on loopback).
        #[arg(long, global = true, env = "SHOAL_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// The gateway's state directory, where its token is (default as `shoal serve`'s).
        #[arg(long, global = true, env = "SHOAL_STATE")]
        state: Option<PathBuf>,
        #[command(subcommand)]
        which: shoal_serve::client::FnCmd,
    },
}

/// `shoal run`: the options are checked and the image run by the same code
/// as the lean `shoal-tender` command (crate `shoal-tender`).
fn run_image(opts: &shoal_tender::RunOpts, image: PathBuf, args: Vec<String>) -> Result<i32> {
    // An unmodified Linux executable runs on shoal's kernel image, which
    // `shoal` (not the lean tender) can build; the rest — the instance
    // image built around it, argv[0], the pool — is shoal-tender's, so
    // that every command taking an image takes an executable alike.
    if exec_cmd::is_executable(&image) {
        exec_cmd::ensure_kernel_image()?;
    }
    let args = shoal_tender::RunArgs::from_opts(opts, image, args.into_iter().map(Into::into).collect())?;
    Ok(shoal_tender::run(&args)?)
}

fn inspect(image: PathBuf) -> Result<()> {
    if exec_cmd::is_executable(&image) {
        return exec_cmd::inspect(&image);
    }
    let path = shoal_manifest::Manifest::path_for(&image);
    let m = shoal_manifest::Manifest::read(&path)?;
    let bytes = std::fs::read(&image).with_context(|| format!("cannot read image {}", image.display()))?;
    if !m.describes(&bytes) {
        bail!(
            "{} belongs to another image than {} (its image_sha256 differs): rebuild the image, or copy it together with its manifest",
            path.display(),
            image.display()
        );
    }
    println!("image {} (layout {}, entry {:#x})", image.display(), m.layout, m.entry);
    println!("{:<10} {:<24} {:<8} {:>12} {:>12} {:>8}", "library", "version", "region", "start", "end", "pages");
    for l in &m.libraries {
        for r in &l.regions {
            let pages = (r.end.div_ceil(4096) * 4096 - r.start) / 4096;
            println!("{:<10} {:<24} {:<8} {:>#12x} {:>#12x} {:>8}", l.info.name, l.info.version, format!("{:?}", r.kind).to_lowercase(), r.start, r.end, pages);
        }
    }
    Ok(())
}

/// Parses the command line; a word after `shoal run`'s image that clap
/// does not know is most likely meant for the program, so the error says
/// where a program's arguments go.
fn parse_cli() -> Cli {
    let e = match Cli::try_parse() {
        Ok(cli) => return cli,
        Err(e) => e,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if e.kind() == clap::error::ErrorKind::UnknownArgument && argv.first().map(String::as_str) == Some("run") {
        if let Some(clap::error::ContextValue::String(arg)) = e.get(clap::error::ContextKind::InvalidArg) {
            if !arg.starts_with('-') {
                eprintln!("shoal: unexpected argument '{arg}': a program's arguments go after `--` (shoal run [OPTIONS] IMAGE -- {arg} ...)");
                std::process::exit(2);
            }
        }
    }
    e.exit()
}

fn real_main() -> Result<i32> {
    let cli = parse_cli();
    match cli.command {
        Cmd::Cc { args } => {
            let paths = shoal_toolchain::Paths::discover()?;
            shoal_toolchain::cc::cc(&paths, &args)?;
            Ok(0)
        }
        Cmd::Build { output, layout, libs, workspace, objects } => {
            let paths = shoal_toolchain::Paths::discover()?;
            if let Some(ws) = workspace {
                for img in shoal_toolchain::workspace::build_workspace(&paths, &ws)? {
                    eprintln!("shoal: built {}", img.display());
                }
                return Ok(0);
            }
            if !matches!(layout.as_str(), "aligned" | "default" | "dce") {
                bail!("--layout {layout}: a single image can use aligned, default or dce; delta and aslr need --workspace");
            }
            let mut libraries = Vec::new();
            for l in libs {
                let (nv, path) = l.split_once('=').with_context(|| format!("--lib {l}: expected NAME@VERSION=FILE"))?;
                let (name, version) = nv.split_once('@').unwrap_or((nv, "unversioned"));
                libraries.push(shoal_toolchain::link::UserLibrary { name: name.to_string(), version: version.to_string(), path: PathBuf::from(path) });
            }
            let output = output.context("-o IMAGE is required")?;
            let mut spec = shoal_toolchain::link::BuildSpec::new(output, objects, libraries);
            spec.layout = layout;
            shoal_toolchain::link::build(&paths, &spec)?;
            Ok(0)
        }
        Cmd::Delta { args } => {
            print!("{}", shoal_delta::cli_main(&args)?);
            Ok(0)
        }
        Cmd::Pages { json, images } => {
            let report = shoal_toolchain::pages::analyse(&images)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report.json())?);
            } else {
                print!("{}", report.table());
            }
            Ok(0)
        }
        Cmd::Run { opts, image, args } => run_image(&opts, image, args),
        Cmd::Pool { which } => {
            pool_cmd::run(which)?;
            Ok(0)
        }
        Cmd::Cache { which } => {
            exec_cmd::cache(which)?;
            Ok(0)
        }
        Cmd::Setup => {
            let paths = shoal_toolchain::Paths::discover()?;
            shoal_toolchain::setup::ensure_libc(&paths, true)?;
            shoal_toolchain::setup::ensure_kernel(&paths, true)?;
            eprintln!("shoal: libc sysroot at {}", paths.sysroot().display());
            eprintln!("shoal: kernel at {}", paths.kernel_lib().display());
            Ok(0)
        }
        Cmd::Inspect { image } => {
            inspect(image)?;
            Ok(0)
        }
        Cmd::OciImage { image, tag, fs, output } => {
            let (packed, name) = if exec_cmd::is_executable(&image) {
                let name = image.file_name().map(|n| n.to_string_lossy().into_owned());
                (exec_cmd::prepare(&image)?, name)
            } else {
                (image.clone(), None)
            };
            let (reference, path, digest) = oci_image::write(&packed, name.as_deref(), &tag, fs.as_deref(), output.as_deref())?;
            println!("{reference} {digest} {}", path.display());
            Ok(0)
        }
        Cmd::Bench { which } => {
            shoal_bench::run(which)?;
            Ok(0)
        }
        Cmd::Recipe { which } => {
            recipe_cmd::run(which)?;
            Ok(0)
        }
        Cmd::Serve { listen, state, insecure_listen, allow_process, allow_path, auth_invoke, upload_quota, uid_range } => {
            let uid_range = uid_range.as_deref().map(shoal_loader::uids::UidRange::parse).transpose()?;
            let upload_quota = shoal_tender::parse_size(&upload_quota).map_err(|e| anyhow::anyhow!("--upload-quota {upload_quota}: {e}"))?;
            // Executables deployed on spt and hvt run on the kernel image,
            // which only this command can build; without a toolchain the
            // gateway still serves images, and such a deploy says why not.
            if let Err(e) = exec_cmd::ensure_kernel_image() {
                eprintln!("shoal: warning: executables cannot be deployed on spt or hvt: {e:#}");
            }
            shoal_serve::serve(shoal_serve::Options {
                listen,
                state,
                insecure_listen,
                allow_process,
                allow_paths: allow_path,
                auth_invoke,
                upload_quota,
                uid_range,
            })?;
            Ok(0)
        }
        Cmd::Fn { gateway, token, state, which } => shoal_serve::client::run(&gateway, token, state, which),
    }
}

fn main() -> ExitCode {
    // Rust ignores SIGPIPE, which turns `shoal inspect IMG | head` into a
    // panic on the next print; a command-line tool should just stop.
    // SAFETY: setting a signal disposition to SIG_DFL before any thread is
    // started has no memory-safety preconditions.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    match real_main() {
        Ok(status) => ExitCode::from((status & 0xff) as u8),
        Err(e) => {
            // One line: the chain of causes joined.
            let mut msg = e.to_string();
            for cause in e.chain().skip(1) {
                let c = cause.to_string();
                if !msg.contains(&c) {
                    msg.push_str(": ");
                    msg.push_str(&c);
                }
            }
            eprintln!("shoal: {}", msg.replace('\n', " "));
            ExitCode::from(EXIT_SHOAL_ERROR)
        }
    }
}
