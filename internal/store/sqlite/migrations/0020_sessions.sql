-- 0020_sessions: the studio's sign-in sessions. Only hashes of the session
-- id (the cookie) and of the token it acts with are kept.

CREATE TABLE sessions (
	hash       TEXT PRIMARY KEY,
	token_hash TEXT NOT NULL,
	csrf       TEXT NOT NULL,
	created    INTEGER NOT NULL,
	expires    INTEGER NOT NULL
) STRICT;

CREATE INDEX sessions_expires ON sessions (expires);
