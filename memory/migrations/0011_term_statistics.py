"""Per-tenant term statistics for BM25 in the keyword channel (issue 14).

``memory_termstat`` holds, per tenant and lexeme, the number of memories whose
search vector contains it (document frequency); ``memory_tenantstat`` the
number of memories and the sum of their distinct-lexeme counts (for the average
document length). Triggers keep both current in the same transaction as the
write: a statement-level trigger per INSERT or DELETE statement (so a bulk
insert or COPY is one grouped upsert, not one per row), and a row trigger for
the rare UPDATE that changes a memory's content. All memories count, whatever
their validity or expiry: IDF is a property of the tenant's language, and
leaving retired rows in keeps every later write from touching the statistics.

Rows are upserted in (tenant, term) order, so concurrent writers take their row
locks in one order and cannot deadlock each other. No foreign key to the tenant:
a tenant's memories are deleted before the tenant (the DELETE trigger zeroes its
rows, and rows at zero are removed), and the test runner's TRUNCATE must not
cascade through a table Django does not know.
"""

from django.db import migrations

SQL = """
CREATE TABLE memory_termstat (
    tenant_id uuid NOT NULL,
    term text NOT NULL,
    df integer NOT NULL,
    PRIMARY KEY (tenant_id, term)
) WITH (fillfactor = 80);

CREATE TABLE memory_tenantstat (
    tenant_id uuid PRIMARY KEY,
    docs bigint NOT NULL,
    lexemes bigint NOT NULL
) WITH (fillfactor = 50);

CREATE FUNCTION memproj_termstat_ins() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO memory_termstat AS s (tenant_id, term, df)
    SELECT n.tenant_id, u.term, count(*)
    FROM new_rows n, unnest(tsvector_to_array(n.search_vector)) AS u(term)
    GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (tenant_id, term) DO UPDATE SET df = s.df + EXCLUDED.df;
    INSERT INTO memory_tenantstat AS s (tenant_id, docs, lexemes)
    SELECT n.tenant_id, count(*), coalesce(sum(length(n.search_vector)), 0)
    FROM new_rows n GROUP BY 1 ORDER BY 1
    ON CONFLICT (tenant_id) DO UPDATE SET docs = s.docs + EXCLUDED.docs, lexemes = s.lexemes + EXCLUDED.lexemes;
    RETURN NULL;
END
$fn$;

CREATE FUNCTION memproj_termstat_del() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE memory_termstat s SET df = s.df - gone.n
    FROM (
        SELECT o.tenant_id, u.term, count(*) AS n
        FROM old_rows o, unnest(tsvector_to_array(o.search_vector)) AS u(term)
        GROUP BY 1, 2
    ) gone
    WHERE s.tenant_id = gone.tenant_id AND s.term = gone.term;
    DELETE FROM memory_termstat s
    USING (SELECT DISTINCT o.tenant_id, u.term FROM old_rows o, unnest(tsvector_to_array(o.search_vector)) AS u(term)) g
    WHERE s.tenant_id = g.tenant_id AND s.term = g.term AND s.df <= 0;
    UPDATE memory_tenantstat s SET docs = s.docs - g.docs, lexemes = s.lexemes - g.lexemes
    FROM (
        SELECT o.tenant_id, count(*) AS docs, coalesce(sum(length(o.search_vector)), 0) AS lexemes
        FROM old_rows o GROUP BY 1
    ) g
    WHERE s.tenant_id = g.tenant_id;
    RETURN NULL;
END
$fn$;

CREATE FUNCTION memproj_termstat_upd() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE memory_termstat s SET df = s.df - 1
    WHERE s.tenant_id = OLD.tenant_id AND s.term = ANY(tsvector_to_array(OLD.search_vector));
    INSERT INTO memory_termstat AS s (tenant_id, term, df)
    SELECT NEW.tenant_id, u.term, 1 FROM unnest(tsvector_to_array(NEW.search_vector)) AS u(term) ORDER BY 2
    ON CONFLICT (tenant_id, term) DO UPDATE SET df = s.df + 1;
    UPDATE memory_tenantstat s
    SET lexemes = s.lexemes - length(OLD.search_vector) + length(NEW.search_vector)
    WHERE s.tenant_id = NEW.tenant_id;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER memory_termstat_ins AFTER INSERT ON memory_memory
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memproj_termstat_ins();
CREATE TRIGGER memory_termstat_del AFTER DELETE ON memory_memory
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION memproj_termstat_del();
CREATE TRIGGER memory_termstat_upd AFTER UPDATE OF content ON memory_memory
    FOR EACH ROW WHEN (OLD.search_vector IS DISTINCT FROM NEW.search_vector)
    EXECUTE FUNCTION memproj_termstat_upd();

-- What is already stored.
INSERT INTO memory_termstat (tenant_id, term, df)
SELECT m.tenant_id, u.term, count(*)
FROM memory_memory m, unnest(tsvector_to_array(m.search_vector)) AS u(term)
GROUP BY 1, 2;
INSERT INTO memory_tenantstat (tenant_id, docs, lexemes)
SELECT tenant_id, count(*), coalesce(sum(length(search_vector)), 0) FROM memory_memory GROUP BY 1;
"""

REVERSE = """
DROP TRIGGER IF EXISTS memory_termstat_ins ON memory_memory;
DROP TRIGGER IF EXISTS memory_termstat_del ON memory_memory;
DROP TRIGGER IF EXISTS memory_termstat_upd ON memory_memory;
DROP FUNCTION IF EXISTS memproj_termstat_ins();
DROP FUNCTION IF EXISTS memproj_termstat_del();
DROP FUNCTION IF EXISTS memproj_termstat_upd();
DROP TABLE IF EXISTS memory_termstat;
DROP TABLE IF EXISTS memory_tenantstat;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0010_search_vector_cjk"),
    ]

    operations = [migrations.RunSQL(SQL, REVERSE)]
