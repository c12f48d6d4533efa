//! `shoal oci-image IMAGE -t NAME[:TAG] [--fs DIR] [-o ARCHIVE]`: packs a
//! shoal image as an OCI image (docs/oci.md) that container engines load —
//! `podman load -i ARCHIVE`, `ctr images import ARCHIVE` — and run through
//! the `shoal-oci` runtime.
//!
//! The archive is an oci-archive: a tar of an OCI image layout
//! (`oci-layout`, `index.json`, `blobs/sha256/…`) holding one manifest,
//! one config and one uncompressed layer. The layer is the root file
//! system: the contents of `--fs DIR` (if given) plus the image at
//! `/NAME-OF-IMAGE` (and its `.manifest.json`, which the pool memory mode
//! reads). The config's entrypoint is that path, so `shoal-oci` finds the
//! image as `process.args[0]` inside the container's root. Entries are
//! written deterministically (zero times, uid 0), so the same input gives
//! the same digests.
//!
//! An unmodified Linux executable is packed as the instance image built
//! around it (`shoal-exec`, as `shoal run` builds it), under the
//! executable's name: the container starts it as any shoal image, with
//! nothing to build on the host that runs it.

use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Why the archive could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OciImageError {
    /// The image file is missing.
    #[error("{0}: no such image file")]
    NoImage(PathBuf),
    /// `--fs` is not a directory.
    #[error("--fs {0}: no such directory")]
    NoFs(PathBuf),
    /// A bad `-t`.
    #[error("-t {0}: expected NAME[:TAG] (lowercase letters, digits, '.', '_', '-' and '/' in the name)")]
    BadName(String),
    /// The image's name is taken in `--fs`.
    #[error("--fs {0} already holds /{1}; the image is placed there")]
    Clash(PathBuf, String),
    /// Reading or writing failed.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> OciImageError + 'a {
    move |source| OciImageError::Io { what, path: path.to_path_buf(), source }
}

/// A full reference `REGISTRY/NAME:TAG` for `-t NAME[:TAG]`: a name
/// without a registry gets `localhost/` (as podman names local images),
/// a missing tag `latest`.
pub fn reference(t: &str) -> Result<String, OciImageError> {
    let bad = || OciImageError::BadName(t.into());
    let (name, tag) = match t.rsplit_once(':') {
        Some((n, tag)) if !tag.contains('/') => (n, tag),
        _ => (t, "latest"),
    };
    // A registry (the first of several components) may carry a port.
    let several = name.contains('/');
    let name_ok = !name.is_empty()
        && name.split('/').enumerate().all(|(i, c)| {
            !c.is_empty() && c.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch) || (ch == ':' && i == 0 && several))
        });
    let tag_ok = !tag.is_empty() && tag.len() <= 128 && tag.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if !name_ok || !tag_ok {
        return Err(bad());
    }
    let first = name.split('/').next().unwrap_or_default();
    let has_registry = name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    Ok(if has_registry { format!("{name}:{tag}") } else { format!("localhost/{name}:{tag}") })
}

/// One content-addressed blob.
struct Blob {
    digest: String,
    bytes: Vec<u8>,
}

impl Blob {
    fn new(bytes: Vec<u8>) -> Blob {
        let digest = format!("sha256:{:x}", Sha256::digest(&bytes));
        Blob { digest, bytes }
    }
    fn descriptor(&self, media_type: &str) -> serde_json::Value {
        serde_json::json!({"mediaType": media_type, "digest": self.digest, "size": self.bytes.len()})
    }
}

/// Appends `dir`'s tree under `prefix` (files, directories, symlinks),
/// sorted so the layer does not depend on directory order.
fn append_tree(b: &mut tar::Builder<Vec<u8>>, dir: &Path, prefix: &Path) -> Result<(), OciImageError> {
    let mut entries: Vec<_> = std::fs::read_dir(dir).map_err(io_err("read", dir))?.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let name = prefix.join(p.file_name().unwrap_or_default());
        let meta = std::fs::symlink_metadata(&p).map_err(io_err("read", &p))?;
        b.append_path_with_name(&p, &name).map_err(io_err("pack", &p))?;
        if meta.is_dir() {
            append_tree(b, &p, &name)?;
        }
    }
    Ok(())
}

/// The layer: `fs`'s tree and the image (plus its manifest) at the top.
fn layer(image: &Path, image_name: &str, fs: Option<&Path>) -> Result<Vec<u8>, OciImageError> {
    let mut b = tar::Builder::new(Vec::new());
    b.mode(tar::HeaderMode::Deterministic);
    b.follow_symlinks(false);
    if let Some(dir) = fs {
        if dir.join(image_name).exists() {
            return Err(OciImageError::Clash(dir.into(), image_name.into()));
        }
        append_tree(&mut b, dir, Path::new(""))?;
    }
    b.append_path_with_name(image, image_name).map_err(io_err("pack", image))?;
    let manifest = shoal_manifest::Manifest::path_for(image);
    if manifest.is_file() {
        b.append_path_with_name(&manifest, format!("{image_name}.manifest.json")).map_err(io_err("pack", &manifest))?;
    }
    b.into_inner().map_err(io_err("pack", image))
}

/// Writes the oci-archive; returns (reference, archive path, manifest digest).
/// The image is packed as `/NAME`, `name` or else its file name (an
/// executable's instance image goes under the executable's name).
pub fn write(image: &Path, name: Option<&str>, tag: &str, fs: Option<&Path>, out: Option<&Path>) -> Result<(String, PathBuf, String), OciImageError> {
    if !image.is_file() {
        return Err(OciImageError::NoImage(image.into()));
    }
    if let Some(d) = fs.filter(|d| !d.is_dir()) {
        return Err(OciImageError::NoFs(d.into()));
    }
    let reference = reference(tag)?;
    let image_name = match name {
        Some(n) => n.to_string(),
        None => image.file_name().map(|n| n.to_string_lossy().into_owned()).ok_or_else(|| OciImageError::NoImage(image.into()))?,
    };
    let out = match out {
        Some(o) => o.to_path_buf(),
        None => {
            let short = reference.trim_start_matches("localhost/").replace(['/', ':'], "_");
            PathBuf::from(format!("{short}.oci.tar"))
        }
    };

    let layer = Blob::new(layer(image, &image_name, fs)?);
    let config = Blob::new(
        serde_json::to_vec(&serde_json::json!({
            // The epoch, not now: the same input gives the same digests.
            "created": "1970-01-01T00:00:00Z",
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Entrypoint": [format!("/{image_name}")],
                "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                "WorkingDir": "/",
                "Labels": {"org.shoal.image": image_name, "org.shoal.runtime": "shoal-oci"}
            },
            "rootfs": {"type": "layers", "diff_ids": [layer.digest]},
            "history": [{"created_by": format!("shoal oci-image {image_name} -t {reference}")}]
        }))
        .unwrap_or_default(),
    );
    let manifest = Blob::new(
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config.descriptor("application/vnd.oci.image.config.v1+json"),
            "layers": [layer.descriptor("application/vnd.oci.image.layer.v1.tar")]
        }))
        .unwrap_or_default(),
    );
    let mut mdesc = manifest.descriptor("application/vnd.oci.image.manifest.v1+json");
    // podman reads the name from ref.name; containerd prefers its own key.
    mdesc["annotations"] = serde_json::json!({
        "org.opencontainers.image.ref.name": reference,
        "io.containerd.image.name": reference
    });
    let index = serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": [mdesc]})).unwrap_or_default();

    fn add(b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) -> std::io::Result<()> {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, name, data)
    }
    let pack = || -> std::io::Result<Vec<u8>> {
        let mut b = tar::Builder::new(Vec::new());
        add(&mut b, "oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
        add(&mut b, "index.json", &index)?;
        for blob in [&manifest, &config, &layer] {
            add(&mut b, &format!("blobs/sha256/{}", blob.digest.trim_start_matches("sha256:")), &blob.bytes)?;
        }
        b.into_inner()
    };
    let bytes = pack().map_err(io_err("pack", &out))?;
    let tmp = out.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &out)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_err("write", &out)(e)
    })?;
    Ok((reference, out, manifest.digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_get_a_registry_and_a_tag() {
        assert_eq!(reference("hello").unwrap(), "localhost/hello:latest");
        assert_eq!(reference("hello:v1").unwrap(), "localhost/hello:v1");
        assert_eq!(reference("shoal/hello").unwrap(), "localhost/shoal/hello:latest");
        assert_eq!(reference("registry.example:5000/x/hello:2").unwrap(), "registry.example:5000/x/hello:2");
        assert_eq!(reference("localhost/hello").unwrap(), "localhost/hello:latest");
        for bad in ["", "Hello", "a//b", "a:", "a:b/c:"] {
            assert!(reference(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_archive_is_an_oci_layout_with_the_image_as_entrypoint() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("app");
        std::fs::write(&img, b"\x7fELF not really").unwrap();
        let fs = dir.path().join("fs");
        std::fs::create_dir_all(fs.join("etc")).unwrap();
        std::fs::write(fs.join("etc/greeting"), b"hi").unwrap();
        let out = dir.path().join("a.tar");
        let (r, path, digest) = write(&img, None, "app:1", Some(&fs), Some(&out)).unwrap();
        assert_eq!((r.as_str(), path.as_path()), ("localhost/app:1", out.as_path()));
        let mut a = tar::Archive::new(std::fs::File::open(&out).unwrap());
        let mut files = std::collections::BTreeMap::new();
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut v).unwrap();
            files.insert(e.path().unwrap().to_string_lossy().into_owned(), v);
        }
        let index: serde_json::Value = serde_json::from_slice(&files["index.json"]).unwrap();
        assert_eq!(index["manifests"][0]["digest"], digest);
        let blob = |d: &serde_json::Value| files[&format!("blobs/sha256/{}", d.as_str().unwrap().trim_start_matches("sha256:"))].clone();
        let manifest: serde_json::Value = serde_json::from_slice(&blob(&index["manifests"][0]["digest"])).unwrap();
        let config: serde_json::Value = serde_json::from_slice(&blob(&manifest["config"]["digest"])).unwrap();
        assert_eq!(config["config"]["Entrypoint"], serde_json::json!(["/app"]));
        let layer = blob(&manifest["layers"][0]["digest"]);
        assert_eq!(format!("sha256:{:x}", Sha256::digest(&layer)), config["rootfs"]["diff_ids"][0]);
        let names: Vec<String> = tar::Archive::new(&layer[..]).entries().unwrap().map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["etc", "etc/greeting", "app"]);
        // Deterministic: the same input, the same digest.
        assert_eq!(write(&img, None, "app:1", Some(&fs), Some(&out)).unwrap().2, digest);
        assert!(write(&img, None, "App", None, Some(&out)).unwrap_err().to_string().starts_with("-t App: expected NAME[:TAG]"));
    }
}
