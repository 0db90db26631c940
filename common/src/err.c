/* Error names and version. */
#include <sluice/common.h>

const char *sluice_strerror(sluice_err e)
{
    switch (e) {
    case SLUICE_OK: return "success";
    case SLUICE_EOF: return "end of data";
    case SLUICE_ERR_TIMEOUT: return "timed out";
    case SLUICE_ERR_IO: return "connection to Redis lost";
    case SLUICE_ERR_PROTOCOL: return "protocol error";
    case SLUICE_ERR_INVALID: return "invalid argument";
    case SLUICE_ERR_NOMEM: return "out of memory";
    case SLUICE_ERR_AUTH: return "authentication or permission refused";
    case SLUICE_ERR_NOQUEUE: return "no such queue";
    case SLUICE_ERR_EXISTS: return "queue exists already";
    case SLUICE_ERR_FULL: return "queue full";
    case SLUICE_ERR_TOOBIG: return "batch too large";
    case SLUICE_ERR_FORMAT: return "corrupt input";
    case SLUICE_ERR_REDIS: return "Redis error";
    case SLUICE_ERR_SYS: return "system error";
    case SLUICE_ERR_PARTIAL: return "epoch ended without the records of failed tasks";
    case SLUICE_ERR_BUSY: return "held by another consumer";
    }
    return "unknown error";
}

const char *sluice_version(void)
{
    return SLUICE_VERSION;
}

uint32_t sluice_version_number(void)
{
    return SLUICE_VERSION_NUMBER;
}
