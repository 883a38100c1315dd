//! Where runtimes live on disk: the Rust twin of `python/multihop/paths.py`.
//!
//! Both must name the same directory for the same environment (the C ABI's
//! `mh_attach` resolves a runtime name here, Python's `Runtime.attach` there);
//! `tests/c/test_capi.py::test_runtime_dir_matches_python` runs both under a
//! set of environments and compares the strings.
//!
//! The rule: `$MULTIHOP_RUNTIME_ROOT` if set (non-empty); else
//! `$XDG_RUNTIME_DIR/multihop` if `$XDG_RUNTIME_DIR` is set, a directory and
//! writable; else `<tempdir>/multihop-<uid>`, where `<tempdir>` is what
//! Python's `tempfile.gettempdir()` picks (the first of `$TMPDIR`, `$TEMP`,
//! `$TMP`, `/tmp`, `/var/tmp`, `/usr/tmp` and the working directory in which
//! a file can be created).  The root is created mode 0700 and must belong to
//! this user.  A runtime's directory is `<root>/<name>`.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};

/// Longest runtime name, in bytes.
pub const MAX_NAME: usize = 64;

/// An environment variable, treated as unset when empty (Python's `if value:`).
fn env(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// The string `pathlib.PurePosixPath(p)` gives: empty and `.` parts dropped,
/// one leading `/` (or exactly two, which POSIX leaves alone), `..` kept.
fn pathlib_norm(p: &[u8]) -> PathBuf {
    let root: &[u8] = if p.starts_with(b"//") && !p.starts_with(b"///") {
        b"//"
    } else if p.starts_with(b"/") {
        b"/"
    } else {
        b""
    };
    let parts: Vec<&[u8]> = p.split(|&c| c == b'/').filter(|s| !s.is_empty() && *s != b".").collect();
    let mut out = root.to_vec();
    out.extend_from_slice(&parts.join(&b'/'));
    if out.is_empty() {
        out.push(b'.');
    }
    PathBuf::from(OsString::from_vec(out))
}

/// `pathlib.Path(base) / tail` for a one-part `tail`.
fn join(base: &Path, tail: &str) -> PathBuf {
    let mut b = base.as_os_str().as_bytes().to_vec();
    b.push(b'/');
    b.extend_from_slice(tail.as_bytes());
    pathlib_norm(&b)
}

/// `os.path.normpath` (POSIX): resolves `.` and `..` lexically.
fn normpath(p: &[u8]) -> Vec<u8> {
    if p.is_empty() {
        return b".".to_vec();
    }
    let initial: usize = if p.starts_with(b"//") && !p.starts_with(b"///") {
        2
    } else if p.starts_with(b"/") {
        1
    } else {
        0
    };
    let mut comps: Vec<&[u8]> = Vec::new();
    for comp in p.split(|&c| c == b'/') {
        if comp.is_empty() || comp == b"." {
            continue;
        }
        if comp != b".." || (initial == 0 && comps.is_empty()) || comps.last() == Some(&&b".."[..]) {
            comps.push(comp);
        } else if !comps.is_empty() {
            comps.pop();
        }
    }
    let mut out = vec![b'/'; initial];
    out.extend_from_slice(&comps.join(&b'/'));
    if out.is_empty() {
        out.push(b'.');
    }
    out
}

/// `os.path.abspath`.
fn abspath(p: &[u8], cwd: &[u8]) -> Vec<u8> {
    if p.starts_with(b"/") {
        normpath(p)
    } else {
        let mut joined = cwd.to_vec();
        if !joined.ends_with(b"/") {
            joined.push(b'/');
        }
        joined.extend_from_slice(p);
        normpath(&joined)
    }
}

fn is_writable_dir(p: &OsStr) -> bool {
    let Ok(md) = std::fs::metadata(p) else { return false };
    if !md.is_dir() {
        return false;
    }
    let Ok(c) = std::ffi::CString::new(p.as_bytes()) else { return false };
    // SAFETY: a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Whether a file can be created in `dir` (what `tempfile` tries).
fn can_create_file_in(dir: &[u8]) -> bool {
    for attempt in 0..100u32 {
        let mut name = dir.to_vec();
        if !name.ends_with(b"/") {
            name.push(b'/');
        }
        name.extend_from_slice(
            format!(".mh-probe-{}-{:x}-{attempt}", std::process::id(), crate::random::random_u64().unwrap_or(attempt as u64)).as_bytes(),
        );
        let path = Path::new(OsStr::from_bytes(&name));
        match std::fs::OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(path) {
            Ok(file) => {
                drop(file);
                let _ = std::fs::remove_file(path);
                return true;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => return false,
        }
    }
    false
}

/// The directory Python's `tempfile.gettempdir()` returns.
pub(crate) fn temp_dir() -> Result<PathBuf> {
    let cwd = std::env::current_dir().ok().map(|p| p.into_os_string().into_vec());
    let mut candidates: Vec<Vec<u8>> = ["TMPDIR", "TEMP", "TMP"].iter().filter_map(|n| env(n)).map(|v| v.into_vec()).collect();
    candidates.extend([b"/tmp".to_vec(), b"/var/tmp".to_vec(), b"/usr/tmp".to_vec()]);
    candidates.push(cwd.clone().unwrap_or_else(|| b".".to_vec()));
    for c in candidates {
        let dir = if c == b"." { c } else { abspath(&c, cwd.as_deref().unwrap_or(b"/")) };
        if can_create_file_in(&dir) {
            return Ok(PathBuf::from(OsString::from_vec(dir)));
        }
    }
    Err(Error::new(ErrorKind::Os, "no usable temporary directory (tried $TMPDIR, $TEMP, $TMP, /tmp, /var/tmp, /usr/tmp and the working directory)"))
}

/// Create `path` (mode 0700; missing parents with the default mode) if
/// needed and check that it is ours; tighten its mode if others could use it.
fn private_dir(path: PathBuf) -> Result<PathBuf> {
    if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(&path) {
        if e.kind() == std::io::ErrorKind::NotFound {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::os(format!("create {}", parent.display()), e))?;
            }
            if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(&path) {
                if !path.is_dir() {
                    return Err(Error::os(format!("create runtime root {}", path.display()), e));
                }
            }
        } else if !path.is_dir() {
            return Err(Error::os(format!("create runtime root {}", path.display()), e));
        }
    }
    let md = std::fs::metadata(&path).map_err(|e| Error::os(format!("stat {}", path.display()), e))?;
    let uid = rustix::process::getuid().as_raw();
    if md.uid() != uid {
        return Err(Error::new(ErrorKind::Os, format!("runtime root {} belongs to uid {}, not to us (uid {uid})", path.display(), md.uid())));
    }
    if md.mode() & 0o077 != 0 {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::os(format!("chmod 0700 {}", path.display()), e))?;
    }
    Ok(path)
}

/// The directory under which this user's runtimes live (created 0700).
pub(crate) fn runtime_root() -> Result<PathBuf> {
    if let Some(over) = env("MULTIHOP_RUNTIME_ROOT") {
        return private_dir(pathlib_norm(over.as_bytes()));
    }
    if let Some(xdg) = env("XDG_RUNTIME_DIR") {
        if is_writable_dir(&xdg) {
            return private_dir(join(&pathlib_norm(xdg.as_bytes()), "multihop"));
        }
    }
    let uid = rustix::process::getuid().as_raw();
    private_dir(join(&temp_dir()?, &format!("multihop-{uid}")))
}

/// `name` if it is a valid runtime name: 1-64 characters from `A-Z a-z 0-9 _ . -`,
/// not starting with `.` or `-`. The fabric's key space (`multihop-fabric`) names runtimes by this same rule.
pub fn check_name(name: &str) -> Result<&str> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= MAX_NAME
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter().all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
    if ok {
        Ok(name)
    } else {
        Err(Error::invalid(format!("invalid runtime name {name:?}: use 1-64 characters from A-Z a-z 0-9 _ . -, not starting with . or -")))
    }
}

/// The directory of runtime `name` (not created; its root is).
pub fn runtime_dir(name: &str) -> Result<PathBuf> {
    check_name(name)?;
    Ok(join(&runtime_root()?, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normpath_like_python() {
        let cases: &[(&str, &str)] = &[
            ("", "."),
            ("/", "/"),
            ("//", "//"),
            ("///", "/"),
            ("a/./b/", "a/b"),
            ("a/../../b", "../b"),
            ("/../a", "/a"),
            ("//a/../b", "//b"),
            ("/x/y/../z/.", "/x/z"),
        ];
        for (i, o) in cases {
            assert_eq!(String::from_utf8(normpath(i.as_bytes())).unwrap(), *o, "normpath({i:?})");
        }
        assert_eq!(abspath(b"t/../u", b"/w"), b"/w/u");
        assert_eq!(abspath(b"/t", b"/w"), b"/t");
    }

    #[test]
    fn pathlib_norm_like_python() {
        let cases: &[(&str, &str)] = &[("a//b/./c/", "a/b/c"), ("/a/../b", "/a/../b"), ("//a", "//a"), ("///a", "/a"), ("./a", "a"), (".", ".")];
        for (i, o) in cases {
            assert_eq!(pathlib_norm(i.as_bytes()), PathBuf::from(o), "Path({i:?})");
        }
    }

    #[test]
    fn names() {
        for good in ["a", "demo", "t-1.2_x", "_", "9", &"x".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", ".a", "-a", "a/b", "a\n", "ä", "a b", &"x".repeat(65)] {
            let e = check_name(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument);
            assert!(e.message.contains("invalid runtime name"), "{}", e.message);
        }
    }

    #[test]
    fn temp_dir_is_usable() {
        let d = temp_dir().unwrap();
        assert!(d.is_absolute() && d.is_dir());
    }
}
