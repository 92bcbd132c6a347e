"""optimistic"""
