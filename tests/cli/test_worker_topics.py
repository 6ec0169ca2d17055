"""The worker refuses, before consuming, topics whose partition count is not its own:
the job events' and the changelogs of its state tables (real Kafka)."""

from __future__ import annotations

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from gpuhint.cli.common import UserError
from gpuhint.cli.worker import _ensure_topics
from gpuhint.wire.config import Settings


@pytest.mark.integration
def test_a_changelog_left_over_from_another_partition_count_is_refused(
    kafka_bootstrap: str, unique_prefix: str
) -> None:
    """Before, only the job-event and telemetry topics were checked: a VC-state
    changelog of 2 partitions beside 1-partition job events was taken as it was, and a
    VC's state could then be restored by a worker that does not own its events."""
    app_id = f"{unique_prefix}-app"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.create_topics([NewTopic(f"{app_id}-vc-state-changelog", 2, 1)])
    finally:
        admin.close()
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap, topic_prefix=unique_prefix, app_id=app_id,
        partitions=1, kafka_retry_s=5,
    )  # fmt: skip
    with pytest.raises(UserError, match=r"vc-state-changelog has 2 partitions"):
        _ensure_topics(settings)
