/* Raw msgpack: the walker that finds where one object ends (mpack.h). The
 * header rules it follows are sluicei_mp_head()'s, inline in mpack.h. */
#include "mpack.h"

int sluicei_mp_skip(const uint8_t *p, size_t n, sluicei_mp_scan *st, size_t *len)
{
    if (st->owed == 0) {
        st->owed = 1;
        st->at = 0;
    }
    while (st->owed > 0) {
        sluicei_mp_hdr h;
        size_t at = st->at;
        int r = sluicei_mp_head(p + at, at < n ? n - at : 0, &h);
        if (r != SLUICEI_MP_OK)
            return r;
        st->at = at + h.size + (size_t)h.payload;
        st->owed += (h.kind == SLUICEI_MP_MAP     ? 2 * h.u
                     : h.kind == SLUICEI_MP_ARRAY ? h.u
                                                  : 0) -
                    1;
    }
    *len = st->at;
    st->at = 0;
    return SLUICEI_MP_OK;
}
