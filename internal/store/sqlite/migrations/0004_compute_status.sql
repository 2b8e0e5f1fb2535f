-- 0004_compute_status: runtime state of a compute that the workspace owns
-- (JSON; NULL when none), such as which schedule occurrences of a compute
-- instance have fired, so that a restart neither repeats nor forgets them.

ALTER TABLE computes ADD COLUMN status TEXT;
