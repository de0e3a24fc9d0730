"""The outbox: events, their deliveries and the senders that carry them (webhooks, Slack, email, Apprise).

Below `services/`, which publish into it, and above `store/`, `sources/` and the models; it imports nothing from
`services/`. `deliveries.send_delivery` is the Celery task that sends one delivery.
"""
