-- PostgreSQL migration 10: a placeholder on the `replies` branch (see
-- ../migrations/0014_webhooks.sql); the lead replaces it with the webhooks' own 0010 when
-- merging. It changes nothing.
-- (asyncpg refuses a script of comments alone: an empty block, which does nothing)
DO $$ BEGIN END $$;
