-- 0005_preemptions: the attempts of jobs that ended because their node was
-- preempted (a low-priority node taken back), for `ferry job show`. One row
-- per attempt: recording it again changes nothing.

CREATE TABLE preemptions (
	job     TEXT NOT NULL REFERENCES jobs (name) ON DELETE CASCADE,
	attempt INTEGER NOT NULL,
	node    TEXT NOT NULL,
	time    INTEGER,
	reason  TEXT NOT NULL,
	PRIMARY KEY (job, attempt)
) STRICT;
