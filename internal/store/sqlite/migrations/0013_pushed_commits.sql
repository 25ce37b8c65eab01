-- A change made by `git push` remembers the commit it was made from, so that a later push whose
-- history holds that commit is taken from there (ADR-0029): the commit is the agent's, and ag
-- lands its tree as a commit of its own. A commit pushed again (after a rejection) names its
-- newest change.
CREATE TABLE pushed_commits (
    repository TEXT NOT NULL,
    git_commit TEXT NOT NULL, -- 40 hex
    change_id  TEXT NOT NULL,
    PRIMARY KEY (repository, git_commit)
) WITHOUT ROWID;

-- A pushed history is walked to the newest mainline commit it holds.
CREATE INDEX revisions_git_commit ON revisions (repository, git_commit) WHERE git_commit != '';
