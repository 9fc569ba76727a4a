-- The replica's secrets, apart from `settings`, which every reader reads (the phase):
-- the privacy key (`privacy_key`, 64 hex digits), which reverses every person reference
-- and opens sealed cursors. On PostgreSQL a reader role (`isir db grant-reader`) is
-- granted every table but this one and the webhook secrets of `watchlists`; it is given
-- the key in a file instead (`database.privacy_key_file`, docs/PRIVACY.md).
CREATE TABLE secrets (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO secrets (key, value) SELECT key, value FROM settings WHERE key = 'privacy_key';
DELETE FROM settings WHERE key = 'privacy_key';
