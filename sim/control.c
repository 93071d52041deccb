/* SPDX-License-Identifier: MIT */
/*
 * control: the control API of beaconsim, on its own port. Tests read the truth (the
 * canonical root and the timing of every slot), read and change node behaviours, switch
 * scenarios on, and read what each node received (submissions) and was asked (request
 * counts). Slots and times are JSON numbers here; roots are 0x-hex strings.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "base/log.h"
#include "sim.h"

static void reply(bm_req_t *req, int status, bm_str_t *s)
{
    bm_buf_t *b = bm_str_finish(s);
    if (!b) {
        bm_resp_error(req, 500, "out of memory");
        return;
    }
    bm_resp_send(req, status, "application/json", b, NULL);
    bm_buf_unref(b);
}

static void put_root(bm_str_t *s, const bs_root_t *r)
{
    char hx[67];
    bs_root_hex(r, hx);
    bm_str_printf(s, "\"%s\"", hx);
}

static json_object *body_json(bm_req_t *req)
{
    bm_buf_t *b = bm_req_body(req);
    if (!b || !b->len)
        return NULL;
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return NULL;
    json_object *o = json_tokener_parse_ex(tok, b->data, (int)b->len);
    if (json_tokener_get_error(tok) != json_tokener_success) {
        json_object_put(o);
        o = NULL;
    }
    json_tokener_free(tok);
    return o;
}

static bool query_u64(bm_req_t *req, const char *name, uint64_t *out)
{
    size_t ql;
    const char *q = bm_req_query(req, &ql);
    size_t nl = strlen(name);
    for (size_t i = 0; q && i < ql;) {
        size_t j = i;
        while (j < ql && q[j] != '&')
            j++;
        if (j - i > nl && memcmp(q + i, name, nl) == 0 && q[i + nl] == '=') {
            char buf[32];
            size_t n = j - i - nl - 1;
            if (n == 0 || n >= sizeof buf)
                return false;
            memcpy(buf, q + i + nl + 1, n);
            buf[n] = 0;
            char *end;
            unsigned long long v = strtoull(buf, &end, 10);
            if (*end || buf[0] == '-')
                return false;
            *out = v;
            return true;
        }
        i = j + 1;
    }
    return false;
}

static bool has_query(bm_req_t *req, const char *name)
{
    size_t ql;
    const char *q = bm_req_query(req, &ql);
    size_t nl = strlen(name);
    for (size_t i = 0; q && i < ql;) {
        size_t j = i;
        while (j < ql && q[j] != '&')
            j++;
        if (j - i >= nl && memcmp(q + i, name, nl) == 0 && (j - i == nl || q[i + nl] == '='))
            return true;
        i = j + 1;
    }
    return false;
}

/* ---- nodes ------------------------------------------------------------------------------ */

static void node_json(bm_str_t *s, bs_sim_t *sim, uint32_t i)
{
    bs_simnode_t *sn = &sim->nodes[i];
    bs_node_t *n = &sn->node;
    bs_node_advance(n, bs_sim_now());
    bm_str_printf(s, "{\"index\":%u,\"url\":\"http://%s:%d\",\"port\":%d,\"listening\":%s,", i,
                  sim->cfg.host, sn->port, sn->port, sn->srv ? "true" : "false");
    bm_str_printf(s, "\"head\":{\"slot\":%llu,\"root\":", (unsigned long long)n->head.slot);
    bs_root_t r = bs_chain_root(sim->chain, n->head);
    put_root(s, &r);
    bm_str_printf(s, ",\"payload_full\":%s},\"branch\":%u,\"subscribers\":%u,\"behaviour\":",
                  n->head_full ? "true" : "false", n->branch, sn->nsubs);
    bs_behav_json(s, &n->behav);
    bm_str_putc(s, '}');
}

static void get_nodes(bm_req_t *req, bs_sim_t *sim)
{
    bm_str_t s = BM_STR_INIT;
    bm_str_puts(&s, "{\"data\":[");
    for (uint32_t i = 0; i < sim->nnodes; i++) {
        if (i)
            bm_str_putc(&s, ',');
        node_json(&s, sim, i);
    }
    bm_str_puts(&s, "]}");
    reply(req, 200, &s);
}

static void get_node(bm_req_t *req, bs_sim_t *sim, uint32_t i)
{
    bm_str_t s = BM_STR_INIT;
    bm_str_puts(&s, "{\"data\":");
    node_json(&s, sim, i);
    bm_str_putc(&s, '}');
    reply(req, 200, &s);
}

static void put_node(bm_req_t *req, bs_sim_t *sim, uint32_t i)
{
    json_object *o = body_json(req);
    if (!o) {
        bm_resp_error(req, 400, "body must be a JSON object of behaviour fields");
        return;
    }
    bs_behav_t b;
    bool reset;
    char err[256];
    int rc = bs_behav_from_json(o, &b, &reset, err, sizeof err);
    json_object_put(o);
    if (rc) {
        bm_resp_error(req, 400, "%s", err);
        return;
    }
    bs_sim_set_behav(sim, i, &b, reset);
    bm_log(BM_LOG_INFO, "control: node %u behaviour changed", i);
    get_node(req, sim, i);
}

static void get_submissions(bm_req_t *req, bs_sim_t *sim, uint32_t i)
{
    bs_node_t *n = &sim->nodes[i].node;
    uint64_t since = 0;
    if (has_query(req, "since") && !query_u64(req, "since", &since)) {
        bm_resp_error(req, 400, "since must be a sequence number");
        return;
    }
    bm_str_t s = BM_STR_INIT;
    bm_str_puts(&s, "{\"data\":[");
    bool first = true;
    for (size_t k = 0; k < n->nsubs; k++) {
        const bs_submission_t *sub = &n->subs[k];
        if (sub->seq <= since)
            continue;
        bm_str_printf(&s, "%s{\"seq\":%llu,\"time_ms\":%llu,\"route\":", first ? "" : ",",
                      (unsigned long long)sub->seq, (unsigned long long)sub->time_ms);
        first = false;
        bm_str_json_string(&s, sub->route ? sub->route : "", sub->route ? strlen(sub->route) : 0);
        bm_str_puts(&s, ",\"target\":");
        bm_str_json_string(&s, sub->target ? sub->target : "",
                           sub->target ? strlen(sub->target) : 0);
        bm_str_printf(&s, ",\"status\":%d,\"headers\":{", sub->status);
        bool hf = true;
        const char *hn[] = {"Content-Type", "Eth-Consensus-Version", "Eth-Blob-Data-Included"};
        const char *hv[] = {sub->content_type, sub->consensus_version, sub->blob_data_included};
        for (int h = 0; h < 3; h++) {
            if (!hv[h])
                continue;
            bm_str_printf(&s, "%s\"%s\":", hf ? "" : ",", hn[h]);
            hf = false;
            bm_str_json_string(&s, hv[h], strlen(hv[h]));
        }
        bm_str_putc(&s, '}');
        if (sub->body && sub->body->len) {
            bool ssz = sub->content_type &&
                       strncasecmp(sub->content_type, "application/octet-stream", 24) == 0;
            json_object *parsed = NULL;
            if (!ssz) {
                json_tokener *tok = json_tokener_new();
                if (tok) {
                    parsed = json_tokener_parse_ex(tok, sub->body->data, (int)sub->body->len);
                    if (json_tokener_get_error(tok) != json_tokener_success) {
                        json_object_put(parsed);
                        parsed = NULL;
                    }
                    json_tokener_free(tok);
                }
            }
            if (parsed) {
                bm_str_puts(&s, ",\"body\":");
                bm_str_append(&s, sub->body->data, sub->body->len);
                json_object_put(parsed);
            } else if (ssz) {
                bm_str_puts(&s, ",\"body_hex\":\"");
                bm_str_hex(&s, sub->body->data, sub->body->len);
                bm_str_putc(&s, '"');
            } else {
                bm_str_puts(&s, ",\"body_text\":");
                bm_str_json_string(&s, sub->body->data, sub->body->len);
            }
        }
        bm_str_putc(&s, '}');
    }
    bm_str_printf(&s, "],\"last_seq\":%llu,\"dropped\":%llu}", (unsigned long long)n->sub_seq,
                  (unsigned long long)n->sub_dropped);
    reply(req, 200, &s);
}

static void get_requests(bm_req_t *req, bs_sim_t *sim, uint32_t i)
{
    bs_node_t *n = &sim->nodes[i].node;
    bm_str_t s = BM_STR_INIT;
    uint64_t total = n->req_other;
    bm_str_puts(&s, "{\"data\":{");
    bool first = true;
    for (int r = 0; r < bs_api_route_count() && r < BS_MAX_ROUTES; r++) {
        if (!n->req_counts[r])
            continue;
        total += n->req_counts[r];
        bm_str_printf(&s, "%s\"%s\":%llu", first ? "" : ",", bs_api_route_name(r),
                      (unsigned long long)n->req_counts[r]);
        first = false;
    }
    if (n->req_other)
        bm_str_printf(&s, "%s\"other\":%llu", first ? "" : ",", (unsigned long long)n->req_other);
    bm_str_printf(&s, "},\"total\":%llu}", (unsigned long long)total);
    reply(req, 200, &s);
}

/* ---- truth -------------------------------------------------------------------------------- */

static void truth_slot(bm_req_t *req, bs_sim_t *sim, uint64_t slot)
{
    bs_chain_t *c = sim->chain;
    const bs_chain_cfg_t *cfg = bs_chain_config(c);
    bm_slot_clock_t k = bs_chain_clock(c);
    bs_slot_info_t si;
    bs_chain_slot_info(c, slot, &si);
    bs_fork_t f = bs_chain_fork_at(c, slot);
    bool gloas = f == BS_FORK_GLOAS;
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s,
                  "{\"slot\":%llu,\"epoch\":%llu,\"fork\":\"%s\",\"start_ms\":%llu,"
                  "\"end_ms\":%llu,\"attestation_due_ms\":%llu,\"aggregate_due_ms\":%llu,"
                  "\"sync_message_due_ms\":%llu,\"contribution_due_ms\":%llu",
                  (unsigned long long)slot, (unsigned long long)bs_chain_epoch_of(c, slot),
                  bs_fork_name(f), (unsigned long long)bm_slot_start_ms(&k, slot),
                  (unsigned long long)bm_slot_start_ms(&k, slot + 1),
                  (unsigned long long)bm_slot_point_ms(&k, slot, gloas ? 2500 : 3333),
                  (unsigned long long)bm_slot_point_ms(&k, slot, gloas ? 5000 : 6667),
                  (unsigned long long)bm_slot_point_ms(&k, slot, gloas ? 2500 : 3333),
                  (unsigned long long)bm_slot_point_ms(&k, slot, gloas ? 5000 : 6667));
    if (gloas)
        bm_str_printf(&s, ",\"payload_due_ms\":%llu,\"payload_attestation_due_ms\":%llu",
                      (unsigned long long)bm_slot_point_ms(&k, slot, 5000),
                      (unsigned long long)bm_slot_point_ms(&k, slot, 7500));
    bs_block_id_t id = {BS_BRANCH_CANON, slot};
    bool exists = bs_chain_exists(c, id);
    bm_str_printf(&s,
                  ",\"skipped\":%s,\"late\":%s,\"late_ms\":%u,\"orphaned\":%s,"
                  "\"competing\":%s,\"canonical\":%s,\"root\":",
                  si.skipped ? "true" : "false", si.late ? "true" : "false", si.late_ms,
                  si.late ? "true" : "false", si.competing ? "true" : "false",
                  exists && !si.late ? "true" : "false");
    if (exists) {
        bs_root_t r = bs_chain_root(c, id);
        put_root(&s, &r);
        bs_block_id_t p;
        bm_str_puts(&s, ",\"parent_root\":");
        if (bs_chain_parent(c, id, &p)) {
            bs_root_t pr = bs_chain_root(c, p);
            put_root(&s, &pr);
            bm_str_printf(&s, ",\"parent_slot\":%llu", (unsigned long long)p.slot);
        } else {
            bm_str_puts(&s, "null");
        }
        bs_root_t dep = bs_chain_dependent_root(c, id, bs_chain_epoch_of(c, slot), 1);
        bm_str_printf(&s, ",\"proposer_index\":%u", slot ? bs_chain_proposer(c, &dep, slot) : 0);
    } else {
        bm_str_puts(&s, "null,\"parent_root\":null");
    }
    bs_block_id_t canon = bs_chain_canon_at(c, slot);
    bs_root_t cr = bs_chain_root(c, canon);
    bm_str_puts(&s, ",\"block_root_at_slot\":");
    put_root(&s, &cr);
    if (si.competing) {
        bs_root_t ar = bs_chain_root(c, (bs_block_id_t){BS_BRANCH_ALT, slot});
        bm_str_puts(&s, ",\"alt_root\":");
        put_root(&s, &ar);
        bm_str_puts(&s, ",\"alt_nodes\":[");
        bool first = true;
        for (uint32_t i = 0; i < sim->nnodes; i++)
            if (si.alt_mask >> i & 1) {
                bm_str_printf(&s, "%s%u", first ? "" : ",", i);
                first = false;
            }
        bm_str_putc(&s, ']');
    }
    (void)cfg;
    bm_str_putc(&s, '}');
    reply(req, 200, &s);
}

static void truth_now(bm_req_t *req, bs_sim_t *sim)
{
    bs_chain_t *c = sim->chain;
    const bs_chain_cfg_t *cfg = bs_chain_config(c);
    uint64_t now = bs_sim_now();
    uint64_t slot = bs_chain_slot_at(c, now);
    uint64_t epoch = bs_chain_epoch_of(c, slot);
    bs_block_id_t head = bs_chain_canon_at(c, slot);
    bs_root_t hr = bs_chain_root(c, head);
    uint64_t je = epoch >= 1 ? epoch - 1 : 0, fe = epoch >= 2 ? epoch - 2 : 0;
    bs_root_t jr = je ? bs_chain_root(c, bs_chain_block_at(c, head, bs_chain_epoch_start(c, je)))
                      : bs_chain_genesis_root(c);
    bs_root_t fr = fe ? bs_chain_root(c, bs_chain_block_at(c, head, bs_chain_epoch_start(c, fe)))
                      : bs_chain_genesis_root(c);
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s,
                  "{\"now_ms\":%llu,\"genesis_ms\":%llu,\"slot_ms\":%u,\"slots_per_epoch\":%u,"
                  "\"validators\":%u,\"nodes\":%u,\"seed\":%llu,\"current_slot\":%llu,"
                  "\"current_epoch\":%llu,\"slot_start_ms\":%llu,\"next_slot_start_ms\":%llu,"
                  "\"fork\":\"%s\",\"gloas_epoch\":",
                  (unsigned long long)now, (unsigned long long)cfg->genesis_ms, cfg->slot_ms,
                  cfg->slots_per_epoch, cfg->validators, sim->nnodes, (unsigned long long)cfg->seed,
                  (unsigned long long)slot, (unsigned long long)epoch,
                  (unsigned long long)bs_chain_slot_start(c, slot),
                  (unsigned long long)bs_chain_slot_start(c, slot + 1),
                  bs_fork_name(bs_chain_fork_at(c, slot)));
    if (cfg->gloas_epoch == BS_FAR_FUTURE)
        bm_str_puts(&s, "null");
    else
        bm_str_printf(&s, "%llu", (unsigned long long)cfg->gloas_epoch);
    bm_str_printf(&s, ",\"big_values\":%s,\"head\":{\"slot\":%llu,\"root\":",
                  bs_chain_big_values(c) ? "true" : "false", (unsigned long long)head.slot);
    put_root(&s, &hr);
    bm_str_printf(&s, "},\"justified\":{\"epoch\":%llu,\"root\":", (unsigned long long)je);
    put_root(&s, &jr);
    bm_str_printf(&s, "},\"finalized\":{\"epoch\":%llu,\"root\":", (unsigned long long)fe);
    put_root(&s, &fr);
    bm_str_puts(&s, "},\"genesis_root\":");
    bs_root_t g = bs_chain_genesis_root(c);
    put_root(&s, &g);
    bm_str_putc(&s, '}');
    reply(req, 200, &s);
}

/* ---- scenarios ------------------------------------------------------------------------------ */

static bool jget_u64(json_object *o, const char *k, uint64_t *out)
{
    json_object *v;
    if (!json_object_object_get_ex(o, k, &v) || !json_object_is_type(v, json_type_int) ||
        json_object_get_int64(v) < 0)
        return false;
    *out = (uint64_t)json_object_get_int64(v);
    return true;
}

static void post_scenario(bm_req_t *req, bs_sim_t *sim)
{
    json_object *o = body_json(req), *t;
    if (!o || !json_object_is_type(o, json_type_object) ||
        !json_object_object_get_ex(o, "type", &t) || !json_object_is_type(t, json_type_string)) {
        json_object_put(o);
        bm_resp_error(req, 400, "body must be {\"type\":...}");
        return;
    }
    bs_chain_t *c = sim->chain;
    const bs_chain_cfg_t *cfg = bs_chain_config(c);
    uint64_t now_slot = bs_chain_slot_at(c, bs_sim_now());
    char type[48];
    snprintf(type, sizeof type, "%s", json_object_get_string(t));
    uint64_t slot = 0, epoch = 0;
    int rc = 0;
    char msg[256] = "";
    if (strcmp(type, "late-block") == 0) {
        if (!jget_u64(o, "slot", &slot) || slot <= now_slot) {
            snprintf(msg, sizeof msg, "late-block needs a \"slot\" after the current slot %llu",
                     (unsigned long long)now_slot);
            rc = BM_EINVAL;
        } else {
            uint64_t delay;
            uint32_t bps = bs_chain_fork_at(c, slot) == BS_FORK_GLOAS ? 2500 : 3333;
            uint64_t due = (uint64_t)bps * cfg->slot_ms / 10000;
            if (!jget_u64(o, "delay_ms", &delay))
                delay = due + cfg->slot_ms / 6;
            if (delay <= due || delay >= cfg->slot_ms) {
                snprintf(msg, sizeof msg,
                         "delay_ms must be after the attestation due time (%llu ms) and "
                         "inside the slot",
                         (unsigned long long)due);
                rc = BM_EINVAL;
            } else if ((rc = bs_chain_set_late(c, slot, (uint32_t)delay)) != 0) {
                snprintf(msg, sizeof msg, "cannot make slot %llu late (competing already?)",
                         (unsigned long long)slot);
            }
        }
    } else if (strcmp(type, "competing") == 0) {
        json_object *nodes;
        uint64_t mask = 0;
        if (!jget_u64(o, "slot", &slot) || slot <= now_slot ||
            !json_object_object_get_ex(o, "nodes", &nodes) ||
            !json_object_is_type(nodes, json_type_array)) {
            snprintf(msg, sizeof msg,
                     "competing needs a \"slot\" after the current slot %llu and \"nodes\"",
                     (unsigned long long)now_slot);
            rc = BM_EINVAL;
        } else {
            for (size_t i = 0; i < json_object_array_length(nodes); i++) {
                int64_t v = json_object_get_int64(json_object_array_get_idx(nodes, i));
                if (v < 0 || v >= (int64_t)sim->nnodes) {
                    snprintf(msg, sizeof msg, "no node %lld", (long long)v);
                    rc = BM_EINVAL;
                    break;
                }
                mask |= 1ull << v;
            }
            if (!rc && (rc = bs_chain_set_competing(c, slot, mask)) != 0)
                snprintf(msg, sizeof msg,
                         "competing needs a proper, non-empty subset of the nodes and a slot "
                         "that is not late");
        }
    } else if (strcmp(type, "fork-transition") == 0) {
        uint64_t now_epoch = bs_chain_epoch_of(c, now_slot);
        if (!jget_u64(o, "epoch", &epoch) || epoch <= now_epoch) {
            snprintf(msg, sizeof msg, "fork-transition needs an \"epoch\" after epoch %llu",
                     (unsigned long long)now_epoch);
            rc = BM_EINVAL;
        } else if (cfg->gloas_epoch != BS_FAR_FUTURE && cfg->gloas_epoch <= now_epoch) {
            snprintf(msg, sizeof msg, "gloas is already active");
            rc = BM_EINVAL;
        } else {
            bs_chain_set_gloas_epoch(c, epoch);
        }
    } else if (strcmp(type, "big-values") == 0) {
        json_object *e;
        bool on = true;
        if (json_object_object_get_ex(o, "enabled", &e))
            on = json_object_get_boolean(e);
        bs_chain_set_big_values(c, on);
    } else {
        snprintf(msg, sizeof msg,
                 "unknown scenario type \"%s\" (late-block, competing, fork-transition, "
                 "big-values)",
                 type);
        rc = BM_EINVAL;
    }
    json_object_put(o);
    if (rc) {
        bm_resp_error(req, 400, "%s", msg);
        return;
    }
    bm_log(BM_LOG_INFO, "control: scenario %s applied", type);
    bs_sim_touch_all(sim);
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s, "{\"ok\":true,\"type\":\"%s\"}", type);
    reply(req, 200, &s);
}

/* ---- routing ----------------------------------------------------------------------------------
 */

void bs_control_handle(bm_req_t *req, void *ud)
{
    bs_sim_t *sim = ud;
    size_t len;
    const char *path = bm_req_path(req, &len);
    const char *m = bm_req_method(req);
    char p[256];
    if (len >= sizeof p) {
        bm_resp_error(req, 404, "not found");
        return;
    }
    memcpy(p, path, len);
    p[len] = 0;
    while (len > 1 && p[len - 1] == '/')
        p[--len] = 0;
    bool get = strcmp(m, "GET") == 0;
    if (strcmp(p, "/sim/v1/truth") == 0) {
        if (!get) {
            bm_resp_error(req, 405, "use GET");
            return;
        }
        uint64_t slot;
        if (has_query(req, "slot")) {
            if (!query_u64(req, "slot", &slot)) {
                bm_resp_error(req, 400, "slot must be a number");
                return;
            }
            truth_slot(req, sim, slot);
        } else {
            truth_now(req, sim);
        }
        return;
    }
    if (strcmp(p, "/sim/v1/scenario") == 0) {
        if (strcmp(m, "POST") != 0) {
            bm_resp_error(req, 405, "use POST");
            return;
        }
        post_scenario(req, sim);
        return;
    }
    if (strcmp(p, "/sim/v1/nodes") == 0) {
        if (!get) {
            bm_resp_error(req, 405, "use GET");
            return;
        }
        get_nodes(req, sim);
        return;
    }
    if (strncmp(p, "/sim/v1/nodes/", 14) == 0) {
        char *rest = p + 14, *end;
        unsigned long i = strtoul(rest, &end, 10);
        if (end == rest || i >= sim->nnodes) {
            bm_resp_error(req, 404, "no such node: %s", rest);
            return;
        }
        if (*end == 0) {
            if (get)
                get_node(req, sim, (uint32_t)i);
            else if (strcmp(m, "PUT") == 0 || strcmp(m, "POST") == 0)
                put_node(req, sim, (uint32_t)i);
            else
                bm_resp_error(req, 405, "use GET or PUT");
            return;
        }
        if (strcmp(end, "/submissions") == 0) {
            if (get) {
                get_submissions(req, sim, (uint32_t)i);
            } else if (strcmp(m, "DELETE") == 0) {
                bs_node_clear_submissions(&sim->nodes[i].node);
                bm_resp_start(req, 204, NULL, 0);
                bm_resp_end(req);
            } else {
                bm_resp_error(req, 405, "use GET or DELETE");
            }
            return;
        }
        if (strcmp(end, "/requests") == 0) {
            if (get) {
                get_requests(req, sim, (uint32_t)i);
            } else if (strcmp(m, "DELETE") == 0) {
                memset(sim->nodes[i].node.req_counts, 0, sizeof sim->nodes[i].node.req_counts);
                sim->nodes[i].node.req_other = 0;
                bm_resp_start(req, 204, NULL, 0);
                bm_resp_end(req);
            } else {
                bm_resp_error(req, 405, "use GET or DELETE");
            }
            return;
        }
    }
    bm_resp_error(req, 404, "Route not found: %s", p);
}
