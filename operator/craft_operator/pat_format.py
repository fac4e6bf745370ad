"""How an Onyx PAT's text begins, in one place for the two that need it: the minting
(``credentials.tokens``) and the API client withholding quoted secrets, which must not
import the credential store (and its database drivers) to know it."""

#: Every PAT begins so; a tenant, if any, comes next and before a dot (REFERENCE.md).
PAT_PREFIX = "onyx_pat_"
