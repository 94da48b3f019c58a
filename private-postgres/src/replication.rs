//! Streaming replication, as an operator sets it up: a primary that standbys can stream
//! from, standbys made from it by `pg_basebackup -R`, and a failover's `pg_ctl promote`.

use super::{describe, run, wait_for, Error, PrivatePostgres, Result};

/// What a primary needs for standbys to stream from it. A standby gets the same: hot
/// standby refuses to run with fewer WAL senders than its primary has. The caller's
/// settings come after these, so a caller can raise `wal_keep_size`.
pub(crate) const REPLICATION_SETTINGS: &str = "wal_level = replica\n\
                                    max_wal_senders = 5\n\
                                    hot_standby = on\n\
                                    wal_keep_size = '256MB'\n";

/// Trust for everyone from 127.0.0.1 and the socket, replication connections included
/// (`pg_basebackup` and the standby's WAL receiver connect to the `replication`
/// pseudo-database, which `all` does not cover).
const REPLICATION_HBA: &str = "local all all trust\n\
                               host all all 127.0.0.1/32 trust\n\
                               local replication all trust\n\
                               host replication all 127.0.0.1/32 trust\n";

impl PrivatePostgres {
    /// Creates a fresh cluster, as [`PrivatePostgres::start_new`], that standbys can
    /// stream from ([`PrivatePostgres::start_standby`]), and starts it.
    pub async fn start_primary(settings: &str) -> Result<Self> {
        let mut primary = Self::unstarted(String::new())?;
        primary.settings = format!("{REPLICATION_SETTINGS}{settings}");
        primary.initdb_and_start_primary().await?;
        Ok(primary)
    }

    /// `initdb`, replication allowed, then started with the settings set.
    pub(crate) async fn initdb_and_start_primary(&mut self) -> Result<()> {
        self.initdb().await?;
        // Written in place: the file keeps the owner initdb gave it.
        let hba = self.data_dir().join("pg_hba.conf");
        std::fs::write(&hba, REPLICATION_HBA)
            .map_err(|source| Error::Io { what: format!("write {}", hba.display()), source })?;
        self.start_on_a_free_port().await
    }

    /// A streaming standby of this primary, on its own port and in its own directory:
    /// a `pg_basebackup -R` of this server with `settings`, started in hot standby.
    /// Returns once it accepts connections and is in recovery.
    pub async fn start_standby(&self, settings: &str) -> Result<Self> {
        let mut standby = Self::unstarted(String::new())?;
        standby.base_backup_of(self.port).await?;
        // pg_basebackup -R appended how to reach the primary to the copy of the primary's
        // postgresql.auto.conf, which `configure` replaces: it is kept from there. The last
        // line is the one -R wrote: a primary that was once a standby (promoted by a
        // failover) still lists the server it followed before, and a copy that kept that
        // line followed a server long gone, silently behind from the moment it was made.
        let auto_conf = standby.data_dir().join("postgresql.auto.conf");
        let backup_settings = std::fs::read_to_string(&auto_conf)
            .map_err(|source| Error::Io { what: format!("read the base backup's {}", auto_conf.display()), source })?;
        let primary_conninfo =
            backup_settings.lines().rev().find(|line| line.starts_with("primary_conninfo")).ok_or_else(|| {
                Error::Unexpected {
                    what: "pg_basebackup -R wrote no primary_conninfo".to_owned(),
                    found: backup_settings.clone(),
                }
            })?;
        standby.settings = format!("{REPLICATION_SETTINGS}{settings}{primary_conninfo}\n");
        standby.start_on_a_free_port().await?;
        let server = &standby;
        wait_for(&format!("the standby on port {} to be in recovery", server.port), move || async move {
            server.try_fetch_one::<bool>("select pg_is_in_recovery()").await.unwrap_or(false)
        })
        .await?;
        Ok(standby)
    }

    /// Promotes this standby to a primary (`pg_ctl promote`), as a failover does: it ends
    /// recovery with the WAL it has, on a new timeline, and takes writes. Returns once it
    /// is out of recovery.
    pub async fn promote(&self) -> Result<()> {
        let output = self.pg_ctl(&["promote"]).await?;
        if !output.status.success() {
            return Err(Error::Command {
                what: format!("pg_ctl promote on port {} failed", self.port),
                report: format!("{}\nserver log:\n{}", describe(&output), self.log()),
            });
        }
        let server = self;
        wait_for(&format!("the server on port {} to leave recovery", self.port), move || async move {
            server.try_fetch_one::<bool>("select not pg_is_in_recovery()").await.unwrap_or(false)
        })
        .await
    }

    /// Copies the primary on `primary_port` into this server's data directory, with
    /// `standby.signal` and the primary's address (`-R`) and the WAL written meanwhile
    /// (`-X stream`).
    pub(crate) async fn base_backup_of(&self, primary_port: u16) -> Result<()> {
        let data = self.data_dir();
        let mut command = self.command(&self.bin.join("pg_basebackup"));
        command.args(["-h", "127.0.0.1", "-p", &primary_port.to_string(), "-U", "postgres", "-D"]).arg(&data).args([
            "-R",
            "-X",
            "stream",
            // A spread checkpoint would make the backup wait on the primary's pace.
            "--checkpoint=fast",
            // As initdb's: the copy dies with the caller.
            "--no-sync",
        ]);
        let output = run(command, "pg_basebackup").await?;
        if !output.status.success() {
            return Err(Error::Command {
                what: format!("pg_basebackup of port {primary_port} into {} failed", data.display()),
                report: describe(&output),
            });
        }
        Ok(())
    }
}
