/* The duplicate filter: the batch ids this consumer delivered in the
 * loop's epoch, in two generations of idset (idset.h) of up to
 * DUP_GEN_MAX ids each, so that memory stays bounded on a queue without
 * epochs. Loop thread only. */
#include "consumer_internal.h"

int dups_seen(sluice_consumer *c, const char *rid)
{
    uint64_t h = idset_hash(rid);
    return idset_has(&c->dups[0], h) || idset_has(&c->dups[1], h);
}

void dups_add(sluice_consumer *c, const char *rid)
{
    idset *cur = &c->dups[c->dups_cur];
    if (cur->n >= DUP_GEN_MAX) {
        c->dups_cur ^= 1;
        cur = &c->dups[c->dups_cur];
        idset_clear(cur);
    }
    idset_add(cur, idset_hash(rid));
}

/* Forgets rid: a prefetched batch dropped before next() handed it out
 * (lease_lost()), so that when it comes again it is no duplicate. */
void dups_del(sluice_consumer *c, const char *rid)
{
    uint64_t h = idset_hash(rid);
    idset_del(&c->dups[0], h);
    idset_del(&c->dups[1], h);
}

void dups_reset(sluice_consumer *c)
{
    idset_clear(&c->dups[0]);
    idset_clear(&c->dups[1]);
}
