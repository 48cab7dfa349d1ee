# The episodes' own GIN index of words, beside the index of every memory: each
# kind now has one (facts, rules and documents since 0045). A read of several
# kinds writes them as ORed equalities (memory.retrieval.keyword_kinds_sql), so
# the planner can take the union of their indexes: roampal's KNOWN CONTEXT read
# of episodes, rules and documents scanned the index of every memory and
# filtered the facts out at the heap one row at a time.

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
    ]
