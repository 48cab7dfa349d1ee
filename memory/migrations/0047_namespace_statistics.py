# Statistics of which tenants hold which kinds in which namespaces, so that the
# planner counts a langmem read's rows as they are. A read names its tenant, its
# kinds, its tenant's graph group and a namespace or a namespace prefix
# (memory.retrieval._NS_PREFIX_ESTIMABLE); taken as independent conditions, a
# namespace that only one tenant uses (the usual case: ("memories", user id))
# is counted at its share of the whole table times the tenant's share, a tenth
# or less of its rows, and the planner trades the vector channel's graph walk
# for a sort of every row of the namespace. With the conditions' most common
# combinations counted together, a large namespace is walked, and a rare one
# (or a small tenant's, below the common combinations) still estimates small
# and keeps the exact sort, the only complete plan there. Prefixes of depth 1
# to 3 are counted; a deeper prefix is estimated as before.

from django.db import migrations

NAMESPACE_STATISTICS = """
CREATE STATISTICS memory_namespace_stats (mcv)
    ON tenant_id, kind, namespace, (namespace[1:1]), (namespace[1:2]), (namespace[1:3]),
       (memproj_graph_group(tenant_id))
    FROM memory_memory;
ANALYZE memory_memory;
"""


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0046_episode_search_gin'),
    ]

    operations = [
        migrations.RunSQL(NAMESPACE_STATISTICS, "DROP STATISTICS IF EXISTS memory_namespace_stats;"),
    ]
