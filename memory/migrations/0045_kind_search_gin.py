# One GIN index of words per knowledge kind instead of one for facts, rules and
# documents together: a read of one kind scanned the entries of all three and
# filtered the other kinds out at the heap, one row at a time; a query whose
# words are common among a large tenant's rules and absent from its facts sent
# every such rule to the heap for a facts read. A read of several of these
# kinds takes the union of their indexes (memory.retrieval.keyword_kinds_sql).

import django.contrib.postgres.indexes
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0044_memory_fillfactor_row_with_vector'),
        ('policy', '0006_policyevent_actor_token_id'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='memory',
            name='memory_knowledge_search_gin',
        ),
        migrations.AddIndex(
            model_name='memory',
            index=django.contrib.postgres.indexes.GinIndex(condition=models.Q(('kind', 'fact'), ('validity', 'active')), fields=['search_vector'], name='memory_fact_search_gin'),
        ),
        migrations.AddIndex(
            model_name='memory',
            index=django.contrib.postgres.indexes.GinIndex(condition=models.Q(('kind', 'rule'), ('validity', 'active')), fields=['search_vector'], name='memory_rule_search_gin'),
        ),
        migrations.AddIndex(
            model_name='memory',
            index=django.contrib.postgres.indexes.GinIndex(condition=models.Q(('kind', 'document'), ('validity', 'active')), fields=['search_vector'], name='memory_document_search_gin'),
        ),
    ]
