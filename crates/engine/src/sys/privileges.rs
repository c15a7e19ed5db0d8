//! Dropping root after binding privileged ports: the process becomes
//! `--user` (and its group, or `--group`) before any request is read, as
//! nginx's workers do.

use std::ffi::CString;
use std::io;

/// Who to become.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// A user name or a numeric uid.
    pub user: Option<String>,
    /// A group name or a numeric gid; default: the user's primary group.
    pub group: Option<String>,
}

impl Identity {
    /// The same identity by number: the user's uid, and the group's gid
    /// (the user's primary group when no group is given). For a process
    /// that sandboxes itself before [`drop_to`] runs, where the user and
    /// group databases (`/etc/passwd`, NSS modules) can no longer be read.
    pub fn resolve(&self) -> io::Result<Identity> {
        let user = self.user.as_deref().map(lookup_user).transpose()?;
        let gid = match (&self.group, &user) {
            (Some(g), _) => Some(lookup_group(g)?),
            (None, Some((_, gid))) => Some(*gid),
            (None, None) => None,
        };
        Ok(Identity {
            user: user.map(|(uid, _)| uid.to_string()),
            group: gid.map(|gid| gid.to_string()),
        })
    }
}

/// Gives the Unix socket files bound at `paths` to `who` (its user, if
/// any, and group), before root is given up: a proxy in the group can
/// connect (mode 0660), and the server can still remove the files at exit
/// as the user. Nothing to do without `--user`/`--group`.
pub(crate) fn give_sockets_to(who: &Identity, paths: &[&std::path::Path]) -> io::Result<()> {
    if paths.is_empty() || (who.user.is_none() && who.group.is_none()) {
        return Ok(());
    }
    let user = who.user.as_deref().map(lookup_user).transpose()?;
    let gid = match (&who.group, &user) {
        (Some(g), _) => Some(lookup_group(g)?),
        (None, Some((_, gid))) => Some(*gid),
        (None, None) => None,
    };
    for path in paths {
        std::os::unix::fs::lchown(path, user.map(|(uid, _)| uid), gid)
            .map_err(|e| io::Error::new(e.kind(), format!("chown unix:{}: {e}", path.display())))?;
    }
    Ok(())
}

/// Switches the whole process (every thread: glibc applies set*id to all
/// of them; rustix's calls, raw system calls, would change only the
/// calling thread, hence libc here) to `who`. Supplementary groups are reduced to the one group.
/// Fails unless running as root, and checks afterwards that root cannot be
/// regained.
pub fn drop_to(who: &Identity) -> io::Result<()> {
    if who.user.is_none() && who.group.is_none() {
        return Ok(());
    }
    if !rustix::process::geteuid().is_root() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "--user/--group need the server to start as root",
        ));
    }
    let user = who.user.as_deref().map(lookup_user).transpose()?;
    let gid = match (&who.group, &user) {
        (Some(g), _) => lookup_group(g)?,
        (None, Some((_, gid))) => *gid,
        (None, None) => unreachable!("checked above"),
    };
    // SAFETY: one gid from a valid array of length 1 that outlives the call.
    if unsafe { libc::setgroups(1, &gid) } != 0 {
        return Err(os_error("setgroups"));
    }
    // SAFETY: plain system calls with integer arguments.
    if unsafe { libc::setgid(gid) } != 0 {
        return Err(os_error("setgid"));
    }
    if let Some((uid, _)) = user {
        // SAFETY: as above.
        if unsafe { libc::setuid(uid) } != 0 {
            return Err(os_error("setuid"));
        }
        // SAFETY: as above; this must fail now that root is gone.
        if uid != 0 && unsafe { libc::setuid(0) } == 0 {
            return Err(io::Error::other("root could be regained after setuid"));
        }
    }
    Ok(())
}

fn os_error(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A user's uid and primary gid, by name or number.
fn lookup_user(name: &str) -> io::Result<(libc::uid_t, libc::gid_t)> {
    let c = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a user name with NUL"))?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: an all-zero passwd is a valid value to be overwritten.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call: the name is a
    // NUL-terminated string, `pwd` and `found` are writable, `buf` has the
    // length given. The strings `pwd` points to live in `buf`.
    let rc = unsafe { libc::getpwnam_r(c.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc == 0 && !found.is_null() {
        return Ok((pwd.pw_uid, pwd.pw_gid));
    }
    if let Ok(uid) = name.parse::<libc::uid_t>() {
        // SAFETY: as above, with a uid.
        let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
        let gid = if rc == 0 && !found.is_null() { pwd.pw_gid } else { uid };
        return Ok((uid, gid));
    }
    Err(io::Error::new(io::ErrorKind::NotFound, format!("no user {name:?}")))
}

/// A group's gid, by name or number.
fn lookup_group(name: &str) -> io::Result<libc::gid_t> {
    let c = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a group name with NUL"))?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: an all-zero group is a valid value to be overwritten.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as in `lookup_user`.
    let rc = unsafe { libc::getgrnam_r(c.as_ptr(), &mut grp, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc == 0 && !found.is_null() {
        return Ok(grp.gr_gid);
    }
    name.parse()
        .map_err(|_| io::Error::new(io::ErrorKind::NotFound, format!("no group {name:?}")))
}
