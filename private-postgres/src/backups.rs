//! Backups and restores, as an operator takes and restores them: a logical dump restored
//! into a new database, a base backup restored to a point in time from the WAL archive, and
//! a copy of the data directory started as it was.

use std::path::{Path, PathBuf};

use super::replication::REPLICATION_SETTINGS;
use super::{describe, run, wait_for, Error, PrivatePostgres, Result};

impl PrivatePostgres {
    /// A primary, as [`PrivatePostgres::start_primary`], that archives every finished WAL
    /// segment into its directory: what a point-in-time restore replays.
    ///
    /// A segment appears in the archive whole or not at all (copied under another name,
    /// then renamed), as PostgreSQL's documentation asks of an archive command: a restore
    /// that began while a plain `cp` was still writing read a segment cut short and
    /// refused to start ("has wrong size").
    pub async fn start_archiving(settings: &str) -> Result<Self> {
        let mut primary = Self::unstarted(String::new())?;
        primary.settings = format!(
            "{REPLICATION_SETTINGS}archive_mode = on\n\
             archive_command = 'cp %p {archive}/%f.partial && mv {archive}/%f.partial {archive}/%f'\n\
             {settings}",
            archive = primary.archive_dir().display()
        );
        primary.initdb_and_start_primary().await?;
        Ok(primary)
    }

    /// A base backup of this server (`pg_basebackup`, no standby settings), not started:
    /// what [`PrivatePostgres::start_recovering_to`] restores.
    pub async fn base_backup(&self) -> Result<Self> {
        let backup = Self::unstarted(String::new())?;
        backup.base_backup_of(self.port).await?;
        let standby_signal = backup.data_dir().join("standby.signal");
        std::fs::remove_file(&standby_signal)
            .map_err(|source| Error::Io { what: format!("remove {}", standby_signal.display()), source })?;
        Ok(backup)
    }

    /// Restores this base backup to the point `target_lsn` of `archived`'s history, as an
    /// operator restores to a point in time: `recovery.signal`, the WAL from `archived`'s
    /// archive, then promotion at the target, onto a new timeline. Returns once it takes
    /// writes. `settings` as for [`PrivatePostgres::start_new`].
    pub async fn start_recovering_to(&mut self, archived: &Self, target_lsn: &str, settings: &str) -> Result<()> {
        self.start_recovering_with(&archived.archive_dir(), target_lsn, settings).await
    }

    /// [`PrivatePostgres::start_recovering_to`] with the WAL `lost` wrote (its stopped
    /// `pg_wal`, which holds what an archive of it would: `wal_keep_size` keeps every
    /// segment since a recent base backup) for a server that was never set to archive.
    pub async fn start_recovering_from_wal_of(&mut self, lost: &Self, target_lsn: &str, settings: &str) -> Result<()> {
        self.start_recovering_with(&lost.data_dir().join("pg_wal"), target_lsn, settings).await
    }

    async fn start_recovering_with(&mut self, wal: &Path, target_lsn: &str, settings: &str) -> Result<()> {
        self.settings = format!(
            "{REPLICATION_SETTINGS}{settings}restore_command = 'cp {wal}/%f %p'\n\
             recovery_target_lsn = '{target_lsn}'\nrecovery_target_action = 'promote'\n",
            wal = wal.display()
        );
        let recovery_signal = self.data_dir().join("recovery.signal");
        std::fs::write(&recovery_signal, "")
            .map_err(|source| Error::Io { what: format!("write {}", recovery_signal.display()), source })?;
        self.start_on_a_free_port().await?;
        let server = &*self;
        wait_for(&format!("the restored server on port {} to reach its target and promote", self.port), move || async move {
            server.try_fetch_one::<bool>("select not pg_is_in_recovery()").await.unwrap_or(false)
        })
        .await
    }

    /// Archives the WAL written so far: switches to a new segment and waits until the one
    /// it left is in the archive.
    pub async fn archive_wal(&self) -> Result<()> {
        let segment: String = self.fetch_one("select pg_walfile_name(pg_switch_wal())").await?;
        let archived = self.archive_dir().join(&segment);
        wait_for(&format!("WAL segment {segment} to be archived"), move || {
            let archived = archived.clone();
            async move { archived.exists() }
        })
        .await
    }

    /// A copy of this server's data directory (`pg_basebackup`) started as it was: no
    /// `recovery.signal`, no recovery target, so it runs crash recovery and stays on this
    /// server's timeline, as a restored disk snapshot or volume copy does. `settings` as
    /// for [`PrivatePostgres::start_new`]. Returns once it takes writes.
    pub async fn start_copy(&self, settings: &str) -> Result<Self> {
        let mut copy = self.base_backup().await?;
        copy.settings = format!("{REPLICATION_SETTINGS}{settings}");
        copy.start_on_a_free_port().await?;
        Ok(copy)
    }

    /// A logical backup of `database` as an operator takes one: `pg_dump --format=custom`,
    /// into a file in this server's directory. Returns the file's path.
    pub async fn dump(&self, database: &str) -> Result<PathBuf> {
        let file = self.dir.join(format!("{database}-{}.dump", uuid::Uuid::new_v4().simple()));
        let mut command = self.command(&self.bin.join("pg_dump"));
        command
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres", "--format=custom", "--file"])
            .arg(&file)
            .arg(database);
        let output = run(command, "pg_dump").await?;
        if !output.status.success() {
            return Err(Error::Command {
                what: format!("pg_dump of {database} on port {} failed", self.port),
                report: describe(&output),
            });
        }
        Ok(file)
    }

    /// Restores a [`PrivatePostgres::dump`] into a new database `database` on this server, as
    /// an operator restores one into a fresh server: `createdb`, then `pg_restore`.
    pub async fn restore(&self, database: &str, dump: &Path) -> Result<()> {
        let port = self.port.to_string();
        let connection = ["-h", "127.0.0.1", "-p", port.as_str(), "-U", "postgres"];
        let mut createdb = self.command(&self.bin.join("createdb"));
        createdb.args(connection).arg(database);
        let output = run(createdb, "createdb").await?;
        if !output.status.success() {
            return Err(Error::Command {
                what: format!("createdb {database} on port {} failed", self.port),
                report: describe(&output),
            });
        }
        let mut pg_restore = self.command(&self.bin.join("pg_restore"));
        pg_restore.args(connection).args(["--exit-on-error", "--dbname", database]).arg(dump);
        let output = run(pg_restore, "pg_restore").await?;
        if !output.status.success() {
            return Err(Error::Command {
                what: format!("pg_restore of {} into {database} on port {} failed", dump.display(), self.port),
                report: describe(&output),
            });
        }
        Ok(())
    }
}
