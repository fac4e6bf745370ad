"""Development and test aids shipped with the operator: a throwaway PostgreSQL server,
Onyx's tables as Onyx creates them, and a stand-in Onyx API that validates PATs.

None of this runs in the operator itself.
"""
