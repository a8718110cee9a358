//! A throwaway PostgreSQL server for tests and trials: [`LocalCluster::start`] runs
//! `initdb` in a temporary directory and starts `postgres` on a free loopback port (trust
//! authentication, superuser `hush`); dropping it stops the server (`pg_ctl stop -m
//! immediate`) and deletes the directory. [`LocalCluster::stop`] and
//! [`LocalCluster::start_again`] stop and restart the same cluster, as a database restart
//! would.
//!
//! The server programs are looked up in `$HUSH_PG_BINDIR`, then `pg_config --bindir`, then
//! Debian's `/usr/lib/postgresql/<version>/bin` (package `postgresql`), then `PATH`.
//! PostgreSQL refuses to run as root: when the process is root, the cluster belongs to the
//! `postgres` user (made by Debian's package) and its programs run through `runuser`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Why the local cluster could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The server programs are not installed.
    #[error(
        "PostgreSQL's server programs (initdb, pg_ctl) were not found in $HUSH_PG_BINDIR, \
         `pg_config --bindir`, /usr/lib/postgresql/*/bin or PATH: install Debian's \
         `postgresql` package or set HUSH_PG_BINDIR"
    )]
    NotInstalled,
    /// A program failed.
    #[error("{program} failed ({status}): {output}")]
    Failed {
        /// What ran.
        program: String,
        /// Its exit status.
        status: String,
        /// What it printed (its tail).
        output: String,
    },
    /// A statement failed.
    #[error("PostgreSQL: {0}")]
    Sql(#[from] postgres::Error),
    /// Filesystem or process error.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClusterError {
    let what = what.into();
    move |source| ClusterError::Io { what, source }
}

/// A running PostgreSQL cluster in a temporary directory.
pub struct LocalCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    as_postgres: bool,
    running: bool,
}

/// The directory with `initdb` and `pg_ctl`, if PostgreSQL's server is installed.
pub fn server_bindir() -> Option<PathBuf> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Some(d) = std::env::var_os("HUSH_PG_BINDIR") {
        return Some(PathBuf::from(d)).filter(|d| has(d));
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let d = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has(&d) {
            return Some(d);
        }
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, d)| has(d))
        .collect();
    debian.sort();
    if let Some((_, d)) = debian.pop() {
        return Some(d);
    }
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).find(|d| has(d)))
}

fn tail(out: &Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

impl LocalCluster {
    /// Creates and starts a cluster; its database `postgres` is reachable at
    /// [`LocalCluster::url`].
    pub fn start() -> Result<Self, ClusterError> {
        let bin = server_bindir().ok_or(ClusterError::NotInstalled)?;
        // /proc/self belongs to the process's effective user.
        let root = std::fs::metadata("/proc/self")
            .map_err(io("reading /proc/self"))?
            .uid()
            == 0;
        let dir = tempfile::Builder::new()
            .prefix("hush-pg-")
            .tempdir()
            .map_err(io("making the cluster's directory"))?;
        let mut cluster = Self {
            bin,
            dir,
            port: 0,
            as_postgres: root,
            running: false,
        };
        if root {
            let chown = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(cluster.dir.path())
                .output()
                .map_err(io("chown"))?;
            cluster.check("chown (is there a `postgres` user?)", chown)?;
        }
        let data = cluster.data_dir();
        let initdb = cluster
            .command("initdb")
            .args([
                "--auth=trust",
                "--username=hush",
                "--encoding=UTF8",
                "--no-sync",
            ])
            .arg("-D")
            .arg(&data)
            .output()
            .map_err(io("running initdb"))?;
        cluster.check("initdb", initdb)?;
        // The free port is found by binding and releasing it; another process may take it
        // before the server binds it: then try another.
        for attempt in 0.. {
            cluster.port = 0;
            match cluster.start_again() {
                Ok(()) => break,
                Err(e) if attempt >= 2 => return Err(e),
                Err(_) => continue,
            }
        }
        Ok(cluster)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn check(&self, program: &str, out: Output) -> Result<(), ClusterError> {
        if out.status.success() {
            return Ok(());
        }
        Err(ClusterError::Failed {
            program: program.into(),
            status: out.status.to_string(),
            output: tail(&out),
        })
    }

    /// Starts the (stopped) cluster again on the same port (a free one the first time).
    pub fn start_again(&mut self) -> Result<(), ClusterError> {
        if self.port == 0 {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("finding a port"))?;
            self.port = probe.local_addr().map_err(io("finding a port"))?.port();
        }
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        let start = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .output()
            .map_err(io("running pg_ctl start"))?;
        if !start.status.success() {
            let log =
                std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
            return Err(ClusterError::Failed {
                program: "pg_ctl start".into(),
                status: start.status.to_string(),
                output: format!("{}\n{log}", tail(&start)),
            });
        }
        self.running = true;
        Ok(())
    }

    /// Stops the server at once (`-m immediate`: like a crash, recovered from on the next
    /// start).
    pub fn stop(&mut self) -> Result<(), ClusterError> {
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "stop"])
            .output()
            .map_err(io("running pg_ctl stop"))?;
        self.running = false;
        self.check("pg_ctl stop", out)
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The connection URL of database `db` on this cluster.
    pub fn url_of(&self, db: &str) -> String {
        format!("postgres://hush@127.0.0.1:{}/{db}", self.port)
    }

    /// The connection URL of the default database, `postgres`.
    pub fn url(&self) -> String {
        self.url_of("postgres")
    }

    /// Creates database `name` (empty) and returns its URL.
    pub fn create_database(&self, name: &str) -> Result<String, ClusterError> {
        let mut admin = postgres::Client::connect(&self.url(), postgres::NoTls)?;
        admin.batch_execute(&format!("CREATE DATABASE \"{name}\""))?;
        Ok(self.url_of(name))
    }
}

/// For tests: a running cluster, or `None` after one `skipped: TEST: needs …` line on
/// stderr when PostgreSQL is not installed — unless `HUSH_REQUIRE_TOOLS=1` (scripts/test,
/// CI), where a missing server fails the test. Any other failure to start panics.
pub fn start_for_test(test: &str) -> Option<LocalCluster> {
    use std::io::Write;
    match LocalCluster::start() {
        Ok(c) => Some(c),
        Err(ClusterError::NotInstalled)
            if std::env::var_os("HUSH_REQUIRE_TOOLS").is_none_or(|v| v != "1") =>
        {
            let _ = writeln!(
                std::io::stderr(),
                "skipped: {test}: needs PostgreSQL's server (Debian package postgresql)"
            );
            None
        }
        Err(e) => panic!("{test}: starting PostgreSQL: {e}"),
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        if self.running {
            let _ = self.stop();
        }
    }
}
