//! The SQLite replica's files on disk: a new replica is created for its owner only
//! (mode 0600, whatever the umask), and an existing one that others can read is named
//! in one warning at start-up.
//!
//! Owns the mode of the database file only; SQLite gives its `-wal` and `-shm` the
//! database file's permissions itself (tested in `tests/secrets.rs`). Must never log
//! anything but a path and a mode, and never change the mode of an existing file (an
//! operator may share a replica with a group on purpose; the warning says so).

use std::path::{Path, PathBuf};

/// The files of the SQLite database at `db`: itself, its `-wal` and its `-shm`.
pub fn replica_files(db: &Path) -> [PathBuf; 3] {
    let with = |suffix: &str| {
        let mut s = db.as_os_str().to_owned();
        s.push(suffix);
        PathBuf::from(s)
    };
    [db.to_path_buf(), with("-wal"), with("-shm")]
}

/// Whether `filename` (as sqlx gives a SQLite database's) names a file, not an
/// in-memory database.
pub fn on_disk(filename: &Path) -> bool {
    let name = filename.to_string_lossy();
    !(name.is_empty() || name.contains(":memory:") || name.contains("mode=memory"))
}

/// Creates the empty database file `db` with mode 0600 if it does not exist, before
/// SQLite opens it (SQLite would create it 0644 under umask 022). An existing file is
/// left as it is.
pub fn create_private(db: &Path) -> std::io::Result<()> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    match o.open(db) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// The files of the replica at `db` that its group or others may read or write, with
/// their modes.
pub fn open_to_others(db: &Path) -> Vec<(PathBuf, u32)> {
    replica_files(db)
        .into_iter()
        .filter_map(|p| mode_open_to_others(&p).map(|m| (p, m)))
        .collect()
}

/// Logs one warning per replica file of `db` its group or others can access: the file
/// holds the privacy key, birth numbers and webhook secrets.
pub fn warn_if_open(db: &Path) {
    for (p, mode) in open_to_others(db) {
        tracing::warn!(
            path = %p.display(),
            mode = %format!("{mode:04o}"),
            "the replica file can be read by its group or others; it holds the privacy key, \
             birth numbers and webhook secrets: chmod 600 it"
        );
    }
}

/// Logs one warning if the privacy key file at `path` is open to its group or others.
pub fn warn_if_open_file(path: &Path) {
    if let Some(mode) = mode_open_to_others(path) {
        tracing::warn!(
            path = %path.display(),
            mode = %format!("{mode:04o}"),
            "the privacy key file can be read by its group or others: chmod 600 it"
        );
    }
}

/// The permission bits of `path` if its group or others may access it.
fn mode_open_to_others(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
        (mode & 0o077 != 0).then_some(mode)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_new_file_is_private_and_an_old_one_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("r.db");
        create_private(&db).unwrap();
        let mode = std::fs::metadata(&db).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(open_to_others(&db).is_empty());
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o640)).unwrap();
        std::fs::write(&db, b"kept").unwrap();
        create_private(&db).unwrap();
        assert_eq!(std::fs::read(&db).unwrap(), b"kept");
        assert_eq!(open_to_others(&db), vec![(db.clone(), 0o640)]);
        assert!(!on_disk(Path::new(":memory:")) && on_disk(&db));
    }
}
