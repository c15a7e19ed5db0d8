//! `check-config`: a configuration checked as serving would check it,
//! without binding anything, and the worst-case memory it allows. With
//! sites, each site's root, routes and certificates are opened as serving
//! would open them.

use std::ffi::OsString;
use std::path::Path;

use anyhow::Context;
use peregrine::host::{normalize, HostMap};
use peregrine::{Limits, TlsConfig};
use peregrine_archive::{Archive, Mode};
use peregrine_files::FileServer;

use super::serve::{is_archive_root, root_refusal};
use crate::flags::{Cli, Command, FileArgs, ServeArchiveArgs, ServerArgs};
use crate::sites::{HandlerSpec, RootKind, SiteSpec};
use crate::{reload, sandbox};

/// `peregrine check-config hello|serve ...`: the checks serving makes
/// before it binds, without binding.
pub(crate) fn check_config(cli: &Cli, argv: &[OsString]) -> anyhow::Result<()> {
    // The checks run inside the sandbox serving would run in: the files
    // they read must be readable there too.
    peregrine_files::read_descriptor_limit();
    // Looked up as `serve` does, before the sandbox hides the user
    // database: a user that does not exist must fail here, not at start.
    let args = cli.command.server_args();
    let run_as = args.run_as()?;
    // A warning, not a failure: the configuration is not at fault, and
    // the server may be started by another user than this check.
    if let Some(why) = root_refusal(&cli.command, &run_as) {
        peregrine::log::warn(format_args!("{why} (as this user, serving would not start)"));
    }
    // The ACME settings, names and files, as serving refuses them (before
    // the sandbox, as serving reads them).
    if let Command::Serve { server, sites, .. } = &cli.command {
        crate::acme::check(sites, &server.tls)?;
        crate::acme::check_files(&server.tls)?;
    }
    let sandbox = sandbox::enter(&cli.command, argv)?;
    eprintln!("peregrine: {sandbox}");
    // `--proxy` upstreams, with `--proxy-ca` read; the response caches
    // they and the sites' proxy routes would have: `--proxy-cache` bytes
    // per worker each, or a route's own `cache` (as `reload::build` and
    // `proxy::route_proxy` give them).
    let mut cache_bytes = 0u64;
    if let Command::Serve {
        proxy,
        proxy_files_first,
        proxy_ca,
        proxy_cache,
        sites,
        ..
    } = &cli.command
    {
        let routes = crate::proxy::upstreams(proxy, proxy_files_first, proxy_ca.as_deref(), *proxy_cache)?;
        // `Cache::new`'s floor.
        let size = |bytes: u64| bytes.max(64 * 1024);
        if let Some(bytes) = proxy_cache {
            cache_bytes = size(*bytes).saturating_mul(routes.len() as u64);
        }
        for route in sites.iter().flat_map(|s| &s.routes) {
            if let HandlerSpec::Proxy(p) = &route.handler {
                if let Some(bytes) = p.cache.or(*proxy_cache) {
                    cache_bytes = cache_bytes.saturating_add(size(bytes));
                }
            }
        }
    }
    match &cli.command {
        Command::Hello { server } => check_server(server, 0, false)?,
        Command::Serve { server, sites, .. } if !sites.is_empty() => {
            let site_tls = sites.iter().any(|site| !site.tls.is_empty());
            check_server(server, cache_bytes, site_tls)?;
            for site in sites {
                check_site(site).with_context(|| format!("site {} ({})", site.names[0], site.given))?;
            }
        }
        Command::Serve {
            root,
            files,
            archive,
            server,
            ..
        } => {
            check_server(server, cache_bytes, false)?;
            if is_archive_root(root, files, archive)? {
                check_archive(root, archive, &[])?;
            } else {
                check_directory(root, files)?;
            }
        }
        _ => unreachable!("check-config takes only the serving subcommands"),
    }
    Ok(())
}

/// A proxy route's files tried first, opened, and its error page, read.
fn check_proxy(p: &crate::sites::Proxy, names: &[String]) -> anyhow::Result<()> {
    match p.files_first.as_deref() {
        Some(HandlerSpec::Files { root, files }) => check_directory(root, files)?,
        Some(HandlerSpec::Archive { root, archive }) => check_archive(root, archive, names)?,
        _ => {}
    }
    if let Some(page) = &p.error_page {
        std::fs::read(page).with_context(|| format!("error-page {}", page.display()))?;
    }
    // The CA file read, and an unverified upstream flagged.
    let ups = crate::proxy::route_upstreams(p)?;
    for up in &ups {
        crate::proxy::warn_if_unverified(up, "check-config");
    }
    // Each upstream's health now, when the route has a check: what the
    // first check of a server started now would find.
    if let Some(uri) = &p.balance.health_uri {
        let timeout = p
            .balance
            .health_timeout
            .map_or(peregrine::proxy::ActiveCheck::TIMEOUT, std::time::Duration::from_secs);
        for up in &ups {
            match peregrine::proxy::probe(up, uri, timeout) {
                Ok(status @ 200..=299) => eprintln!("peregrine: proxy {}: health check {uri}: {status}, in", up.url()),
                Ok(status) => eprintln!("peregrine: proxy {}: health check {uri}: {status}, OUT", up.url()),
                Err(why) => eprintln!("peregrine: proxy {}: health check {uri}: {why}, OUT", up.url()),
            }
        }
    }
    Ok(())
}

/// A site's roots (its own and its routes'), opened as serving opens them,
/// and its certificates, loaded.
fn check_site(site: &SiteSpec) -> anyhow::Result<()> {
    match site.kind {
        RootKind::Directory => check_directory(&site.root, &site.files)?,
        RootKind::Archive => check_archive(&site.root, &site.archive, &site.names)?,
    }
    for route in &site.routes {
        let checked = match &route.handler {
            HandlerSpec::Files { root, files } => check_directory(root, files),
            HandlerSpec::Archive { root, archive } => check_archive(root, archive, &site.names),
            HandlerSpec::Redirect { .. } => Ok(()),
            HandlerSpec::Proxy(p) => check_proxy(p, &site.names),
        };
        checked.with_context(|| format!("route {} ({})", route.path, route.given))?;
    }
    let mut pairs = site.tls.iter();
    if let Some((cert, key)) = pairs.next() {
        let mut tls = TlsConfig::from_pem_files(cert, key)?;
        for (cert, key) in pairs {
            tls = tls.with_cert(cert, key)?;
        }
        drop(tls);
    }
    Ok(())
}

/// A directory root, as `serve DIR` checks it (with its warnings).
fn check_directory(root: &Path, files: &FileArgs) -> anyhow::Result<()> {
    FileServer::new(files.options(root.to_owned()))?;
    // The `_redirects` proxy rules the operator's list let through (a
    // refused one failed above, as it fails the start).
    if let Ok(text) = std::fs::read(root.join("_redirects")) {
        let rules = peregrine_files::conventions::parse_redirects_allowing(&text, &files.proxy_allow)
            .map_err(anyhow::Error::msg)?;
        for r in rules.iter().filter(|r| r.status == 200 && !r.to.starts_with('/')) {
            eprintln!(
                "peregrine: {}/_redirects: proxy rule {} -> {}: allowed (proxy-allow)",
                root.display(),
                r.text(),
                r.to
            );
        }
    }
    let itself = peregrine::Identity {
        user: None,
        group: None,
    };
    reload::warn_if_nothing_to_serve(root, &files.index, &itself);
    Ok(())
}

/// An archive root, as `serve ARCHIVE` opens it (with keys to trust, its
/// signature checked over every byte, as serving would); with sites, a
/// warning for the hosts it holds that none of the site's `names` covers:
/// the site is chosen by its names, then the archive's host by Host, so
/// those are unreachable.
fn check_archive(root: &Path, args: &ServeArchiveArgs, names: &[String]) -> anyhow::Result<()> {
    let options = args.options()?;
    let archive = match options.trusted.is_empty() {
        true => Archive::open(root, Mode::Map)?,
        false => options.check(root)?.0,
    };
    // Its `_redirects` proxy rules, against this server's list (as each
    // load checks them), listed.
    let at = |e| anyhow::anyhow!("{}: {e}", root.display());
    for (site, path, to) in peregrine_archive::proxy_rules_allowed(&archive, &options.proxy_allow).map_err(at)? {
        eprintln!(
            "peregrine: {} (site {site}): proxy rule {path} -> {to}: allowed (proxy-allow)",
            root.display()
        );
    }
    if names.is_empty() {
        return Ok(());
    }
    let mut covered = HostMap::new();
    for name in names {
        // Normal already: `sites::resolve` read them so.
        let _ = covered.insert(name, ());
    }
    let outside: Vec<String> = (archive.hosts().into_iter())
        .map(|(host, _)| host)
        .filter(|host| normalize(host.as_bytes()).map_or(true, |h| covered.get(&h).is_none()))
        .collect();
    if !outside.is_empty() {
        peregrine::log::warn(format_args!(
            "{} holds hosts that no name of its site covers, so they are unreachable: {}",
            root.display(),
            outside.join(", ")
        ));
    }
    Ok(())
}

/// `check-config`: what `run` checks before it binds, without binding (the
/// port may well be in use by the server being reconfigured).
/// What building the server would refuse, without binding anything or
/// taking systemd's sockets: `reload::build` makes the same checks.
/// `cache_bytes`: the response caches' bound per worker, summed;
/// `site_tls`: some site has its own certificates.
fn check_server(args: &ServerArgs, cache_bytes: u64, site_tls: bool) -> anyhow::Result<()> {
    let limits = Limits {
        proxy_cache_bytes: cache_bytes,
        ..args.limits.to_limits()?
    };
    eprintln!("peregrine: {}", memory_line(&limits));
    args.unix_binds()?;
    args.tls.config()?;
    args.http3(site_tls)?;
    Ok(())
}

/// The worst-case memory per worker, as `check-config` states it.
fn memory_line(l: &Limits) -> String {
    const MIB: u64 = 1 << 20;
    let total = l.worst_case_bytes_per_worker();
    // What each upstream connection may read past the output budget.
    let upstream = Limits {
        upstream_conns_max: 0,
        ..l.clone()
    };
    let upstream_bytes = total - upstream.worst_case_bytes_per_worker();
    let caches = l.proxy_cache_memory();
    let per_conn = (total
        - upstream_bytes
        - caches
        - l.body_budget_bytes as u64
        - l.output_budget_bytes as u64
        - Limits::WS_DEFLATE_BYTES
        - Limits::PROXY_SPARE_BYTES)
        / (l.n_conns_max.max(1) as u64);
    let mut line = format!(
        "memory per worker at most {} MiB: request bodies {} MiB + queued answers {} MiB + {} connections x {} KiB \
         + WebSocket compression {} MiB + proxy request buffers {} KiB + {} upstream connections x {} KiB",
        total.div_ceil(MIB),
        l.body_budget_bytes as u64 / MIB,
        l.output_budget_bytes as u64 / MIB,
        l.n_conns_max,
        per_conn / 1024,
        Limits::WS_DEFLATE_BYTES.div_ceil(MIB),
        Limits::PROXY_SPARE_BYTES / 1024,
        l.upstream_conns_max,
        upstream_bytes / (l.upstream_conns_max.max(1) as u64) / 1024
    );
    if caches > 0 {
        // Entries, and as much again in answers being read in.
        line.push_str(&format!(
            " + proxy response caches {} MiB (2 x {} MiB)",
            caches.div_ceil(MIB),
            l.proxy_cache_bytes.div_ceil(MIB)
        ));
    }
    line
}
