"""Job addresses of a multi-process run (`--job-addresses`), parsed without importing a framework
(the command line checks them while reading its flags; `keras_vit.training.multihost` uses them)."""

ENV_ADDRESSES = "KERAS_DISTRIBUTION_JOB_ADDRESSES"


def parse_job_addresses(text):
    """`"10.0.0.1:1234,10.0.0.2:1234"` -> `["10.0.0.1:1234", "10.0.0.2:1234"]`, each checked.

    Example:

    >>> parse_job_addresses("127.0.0.1:12345")
    ['127.0.0.1:12345']
    """
    addresses = [part.strip() for part in str(text).split(",")]
    for address in addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                "Job addresses must be HOST:PORT (comma-separated for several, process 0's "
                "first), e.g. 10.0.0.1:1234 (--job-addresses or "
                f"{ENV_ADDRESSES}). Received: {text!r}"
            )
    return addresses
