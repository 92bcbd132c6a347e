"""slicer"""
