# The episodes' own GIN index of words, in place of the index of every memory:
# each kind now has one (facts, rules and documents since 0045), and a read of
# several kinds takes the union of theirs (memory.retrieval.keyword_kinds_sql).
# A read of episodes, rules and documents (roampal's KNOWN CONTEXT) scanned the
# index of every memory and filtered the facts out at the heap one row at a
# time; a fact, rule or document write now inserts into one GIN index, not two.
# Every keyword read is of active memories, so no read needs the old index.

import django.contrib.postgres.indexes
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0045_kind_search_gin'),
        ('policy', '0006_policyevent_actor_token_id'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='memory',
            index=django.contrib.postgres.indexes.GinIndex(condition=models.Q(('kind', 'episode'), ('validity', 'active')), fields=['search_vector'], name='memory_episode_search_gin'),
        ),
        migrations.RemoveIndex(
            model_name='memory',
            name='memory_search_vector_gin',
        ),
    ]
